package kubeadapter_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/kubeadapter"
)

// cutProxy forwards TCP connections to a target and can cut them all,
// like a network failure between client and apiserver.
type cutProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		l.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// cut closes every open connection; new ones are still accepted.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	return len(p.conns)
}

// countingLists counts full List calls (Head's one-object lists aside) and
// Watch calls of the real client, to tell a resumed watch from a relist.
type countingLists struct {
	kubeadapter.Client[*corev1.ConfigMapList]
	lists, watches atomic.Int32
}

func (c *countingLists) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	c.watches.Add(1)
	return c.Client.Watch(ctx, opts)
}

func (c *countingLists) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	if opts.Limit != 1 {
		c.lists.Add(1)
	}
	return c.Client.List(ctx, opts)
}

// TestBrokenWatchResumes cuts the connections between the informer and the
// apiserver: the stream ends, the watch is reopened from the last version
// (the apiserver still has it), and changes made during the cut arrive
// without a relist.
func TestBrokenWatchResumes(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	ns := createNamespace(t, cs, "resume")
	cms := configMaps{cs: cs, ns: ns}

	u, err := url.Parse(kube.Config().Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startCutProxy(t, u.Host)
	cfg := kube.Config()
	cfg.Host = "https://" + proxy.l.Addr().String()
	viaProxy, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := &countingLists{Client: viaProxy.CoreV1().ConfigMaps(ns)}
	var expired atomic.Int32
	inf := core.NewSharedIndexInformer[*corev1.ConfigMap](
		kubeadapter.New[*corev1.ConfigMap](client, kubeadapter.Config{}),
		core.InformerOptions[*corev1.ConfigMap]{
			Logger:  testLogger(t),
			Backoff: core.Backoff{Initial: 100 * time.Millisecond, Max: time.Second},
			ErrorHandler: func(err error) {
				t.Logf("informer error: %v", err)
				if errors.Is(err, core.ErrExpired) {
					expired.Add(1)
				}
			},
		})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i, name := range []string{"alpha", "bravo"} {
		if _, err := cms.put(ctx, name, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	runInformer(t, inf)
	// A change delivered through the watch proves the stream is open.
	b, err := cms.put(ctx, "bravo", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.WaitFor(ctx, rv(t, b.ResourceVersion)); err != nil {
		t.Fatal(err)
	}
	watchesBefore := client.watches.Load()

	if n := proxy.cut(); n == 0 {
		t.Fatal("no connection to cut: the informer does not go through the proxy")
	}
	var last core.ResourceVersion
	if last, err = cms.delete(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	cm, err := cms.put(ctx, "charlie", 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	last = max(last, rv(t, cm.ResourceVersion))
	if err := inf.WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	if _, ok := inf.Lister().Get(ns + "/alpha"); ok {
		t.Errorf("%s/alpha still cached after its delete", ns)
	}
	if got, ok := inf.Lister().Get(ns + "/charlie"); !ok || got.ResourceVersion != cm.ResourceVersion {
		t.Errorf("%s/charlie: cache has %v (found %t), want version %s", ns, got, ok, cm.ResourceVersion)
	}
	t.Logf("watch calls: %d before the cut, %d after; full lists: %d", watchesBefore, client.watches.Load(), client.lists.Load())
	if client.watches.Load() == watchesBefore {
		t.Errorf("no new watch after the connections were cut: the watch did not break")
	}
	if n := client.lists.Load(); n != 1 || expired.Load() != 0 {
		t.Errorf("the informer listed %d times (%d expired errors); a broken watch within the apiserver's history must resume, not relist", n, expired.Load())
	}
}
