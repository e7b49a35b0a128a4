package etcd_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// proxy forwards TCP connections to a server and can cut them: Down
// closes every open connection and turns new ones away until Up.
type proxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{l: l, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = l.Close()
		p.Down()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) Endpoint() string { return "http://" + p.l.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(in, out)
		go pipe(out, in)
	}
}

func (p *proxy) Down() {
	p.mu.Lock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

func (p *proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// TestInformerSurvivesConnectionCut cuts the informer's connection to a
// running etcd while others keep writing: once it is back, the watch
// resumes and delivers exactly the writes made during the cut, without a
// relist.
func TestInformerSurvivesConnectionCut(t *testing.T) {
	srv := harness.StartEtcd(t)
	direct := srv.Client(t)
	u, err := url.Parse(srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	px := startProxy(t, u.Host)
	viaProxy, err := clientv3.New(clientv3.Config{Endpoints: []string{px.Endpoint()}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = viaProxy.Close() })

	prefix := uniquePrefix("cut")
	ctx, cancel := context.WithTimeout(context.Background(), 5*converge)
	defer cancel()
	for i := 0; i < 5; i++ {
		if _, err := putItem(ctx, direct, fmt.Sprintf("%sk%d", prefix, i), item{Version: 1}); err != nil {
			t.Fatal(err)
		}
	}
	lw := &gatedLW{ListerWatcher: newLW(t, viaProxy, prefix, 0)}
	rec := newRecorder()
	inf := core.NewSharedIndexInformer[item](lw, core.InformerOptions[item]{
		Name:         "cut",
		ErrorHandler: rec.onError,
		Backoff:      core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	})
	if _, err := inf.AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	if _, err := putItem(ctx, direct, prefix+"k0", item{Version: 2}); err != nil {
		t.Fatal(err)
	}
	requireConverged(t, inf, direct, prefix)

	px.Down()
	for i := 0; i < 5; i++ {
		if _, err := putItem(ctx, direct, fmt.Sprintf("%sk%d", prefix, i), item{Version: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := direct.Delete(ctx, prefix+"k4"); err != nil {
		t.Fatal(err)
	}
	if _, err := putItem(ctx, direct, prefix+"new", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	// Long enough for the client to notice the cut and fail to reconnect
	// at least once; not a timing assertion.
	time.Sleep(300 * time.Millisecond)
	if got := cacheState(inf); got["k0"].Version != 2 {
		t.Fatalf("the cache saw k0 = %+v while the connection was cut: the proxy does not cut", got["k0"])
	}
	px.Up()

	requireConverged(t, inf, direct, prefix)
	rec.waitFor(t, "k0", "add 1", "update 2", "update 3")
	rec.waitFor(t, "k4", "add 1", "update 3", "delete 3")
	rec.waitFor(t, "new", "add 1")
	if n := lw.lists.Load(); n != 1 {
		t.Fatalf("informer listed %d times, want 1", n)
	}
}
