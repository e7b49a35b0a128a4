package kubeinformer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// seen records, per key, the versions an informer's handlers were told
// about, in the order they were told.
type seen struct {
	mu       sync.Mutex
	versions map[string][]string
	unknown  int // deletes with finalStateUnknown (inferred by a relist)
}

func newSeen() *seen { return &seen{versions: map[string][]string{}} }

func (s *seen) add(key, rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.versions[key] = append(s.versions[key], rv)
}

func (s *seen) snapshot() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]string, len(s.versions))
	for k, v := range s.versions {
		out[k] = slices.Clone(v)
	}
	return out
}

// scope is one watched set, watched by client-go's informer and by ours.
type scope struct {
	name      string
	namespace string // "" = all namespaces
	selector  string
}

// sideBySide runs client-go's SharedIndexInformer and dbinformer's over the
// same scope.
type sideBySide struct {
	scope    scope
	clientgo cache.SharedIndexInformer
	ours     *core.SharedIndexInformer[*corev1.ConfigMap]
	cgSeen   *seen
	ourSeen  *seen
	expired  chan struct{} // closed when our informer saw an expired watch
	cgStop   chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func startSideBySide(t *testing.T, cs kubernetes.Interface, sc scope) *sideBySide {
	t.Helper()
	s := &sideBySide{scope: sc, cgSeen: newSeen(), ourSeen: newSeen(), expired: make(chan struct{}), cgStop: make(chan struct{})}

	lw := cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", sc.namespace, func(o *metav1.ListOptions) {
		o.LabelSelector = sc.selector
	})
	s.clientgo = cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	if _, err := s.clientgo.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			cm := obj.(*corev1.ConfigMap)
			s.cgSeen.add(kubeinformer.Key(cm), cm.ResourceVersion)
		},
		UpdateFunc: func(_, obj any) {
			cm := obj.(*corev1.ConfigMap)
			s.cgSeen.add(kubeinformer.Key(cm), cm.ResourceVersion)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				s.cgSeen.mu.Lock()
				s.cgSeen.unknown++
				s.cgSeen.mu.Unlock()
				s.cgSeen.add(d.Key, "deleted")
				return
			}
			cm := obj.(*corev1.ConfigMap)
			s.cgSeen.add(kubeinformer.Key(cm), cm.ResourceVersion+"-deleted")
		},
	}); err != nil {
		t.Fatal(err)
	}

	ourLW, err := kubeinformer.NewResource[*corev1.ConfigMap](context.Background(), cs.CoreV1().ConfigMaps(sc.namespace), kubeinformer.Options{
		Namespace:     sc.namespace,
		LabelSelector: sc.selector,
		PageSize:      7,
	})
	if err != nil {
		t.Fatal(err)
	}
	var expiredOnce sync.Once
	s.ours = core.NewSharedIndexInformer[*corev1.ConfigMap](ourLW, core.InformerOptions[*corev1.ConfigMap]{
		Name: "ours " + sc.name,
		ErrorHandler: func(err error) {
			if errors.Is(err, driver.ErrExpired) {
				expiredOnce.Do(func() { close(s.expired) })
			}
			t.Logf("%s: our informer reports: %v", sc.name, err)
		},
		Logger: testLogger(t),
		Backoff: core.Backoff{
			Initial: 100 * time.Millisecond,
			Max:     2 * time.Second,
		},
	})
	if _, err := s.ours.AddEventHandler(core.ResourceEventHandlerFuncs[*corev1.ConfigMap]{
		AddFunc: func(key string, cm *corev1.ConfigMap, _ bool) { s.ourSeen.add(key, cm.ResourceVersion) },
		UpdateFunc: func(key string, _, cm *corev1.ConfigMap) {
			s.ourSeen.add(key, cm.ResourceVersion)
		},
		DeleteFunc: func(key string, cm *corev1.ConfigMap, unknown bool) {
			if unknown {
				s.ourSeen.mu.Lock()
				s.ourSeen.unknown++
				s.ourSeen.mu.Unlock()
				s.ourSeen.add(key, "deleted")
				return
			}
			s.ourSeen.add(key, cm.ResourceVersion+"-deleted")
		},
	}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.clientgo.Run(s.cgStop)
	}()
	go func() {
		defer s.wg.Done()
		if err := s.ours.Run(ctx); err != nil {
			t.Errorf("%s: Run: %v", sc.name, err)
		}
	}()
	t.Cleanup(s.stop)

	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), s.clientgo.HasSynced) {
		t.Fatalf("%s: client-go informer did not sync", sc.name)
	}
	if err := s.ours.WaitForCacheSync(sctx); err != nil {
		t.Fatalf("%s: %v", sc.name, err)
	}
	return s
}

func (s *sideBySide) stop() {
	s.cancel()
	select {
	case <-s.cgStop:
	default:
		close(s.cgStop)
	}
	s.wg.Wait()
}

// state is key -> resourceVersion plus the data, which is what the caches
// must agree on.
func cmState(cms []*corev1.ConfigMap) map[string]string {
	out := make(map[string]string, len(cms))
	for _, cm := range cms {
		out[kubeinformer.Key(cm)] = fmt.Sprintf("rv=%s data=%v labels=%v", cm.ResourceVersion, cm.Data, cm.Labels)
	}
	return out
}

func (s *sideBySide) clientgoState() map[string]string {
	var cms []*corev1.ConfigMap
	for _, o := range s.clientgo.GetStore().List() {
		cms = append(cms, o.(*corev1.ConfigMap))
	}
	return cmState(cms)
}

func (s *sideBySide) ourState() map[string]string { return cmState(s.ours.Lister().List(nil)) }

// serverState is a fresh consistent List of the scope.
func serverState(t *testing.T, cs kubernetes.Interface, sc scope) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := cs.CoreV1().ConfigMaps(sc.namespace).List(ctx, metav1.ListOptions{LabelSelector: sc.selector})
	if err != nil {
		t.Fatalf("%s: list: %v", sc.name, err)
	}
	var cms []*corev1.ConfigMap
	for i := range l.Items {
		cms = append(cms, &l.Items[i])
	}
	return cmState(cms)
}

func diffStates(a, b map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if b[k] != a[k] {
			out = append(out, fmt.Sprintf("%s: %q vs %q", k, a[k], b[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s: missing vs %q", k, b[k]))
		}
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("... and %d more", len(out)-20))
	}
	return strings.Join(out, "\n")
}

// converge waits (generously) until both caches equal the server's state.
func (s *sideBySide) converge(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		want := serverState(t, cs, s.scope)
		cg, ours := s.clientgoState(), s.ourState()
		if maps.Equal(want, cg) && maps.Equal(want, ours) {
			t.Logf("%s: both caches hold the server's %d objects", s.scope.name, len(want))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: caches did not converge to the server's state.\nclient-go vs server:\n%s\nours vs server:\n%s",
				s.scope.name, diffStates(cg, want), diffStates(ours, want))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkOrder requires every key's versions never to go back, as each
// handler saw them. A relist replays unchanged objects as updates at the
// same version, in client-go and here alike.
func checkOrder(t *testing.T, name string, sn map[string][]string) {
	t.Helper()
	for key, vs := range sn {
		var prev uint64
		for _, v := range vs {
			if v == "deleted" {
				continue
			}
			n := uint64(rv(t, strings.TrimSuffix(v, "-deleted")))
			if n < prev {
				t.Errorf("%s: key %s: versions out of order: %v", name, key, vs)
				break
			}
			prev = n
		}
	}
}

// workload does seeded random creates, updates (including label changes
// that move objects in and out of a selector) and deletes over names in
// two namespaces, from several writers each owning its names. It returns
// the version of its last write.
func workload(t *testing.T, cs kubernetes.Interface, seed uint64, namespaces []string, ops int) core.ResourceVersion {
	t.Helper()
	const writers, namesPerWriter = 4, 6
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		mu   sync.Mutex
		last core.ResourceVersion
		wg   sync.WaitGroup
		errs = make(chan error, writers)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			exists := map[string]bool{}
			for i := range ops / writers {
				ns := namespaces[rng.IntN(len(namespaces))]
				name := fmt.Sprintf("w%d-%d", w, rng.IntN(namesPerWriter))
				key := ns + "/" + name
				var v core.ResourceVersion
				var err error
				if exists[key] && rng.IntN(4) == 0 {
					v, err = kubetest.DeleteConfigMap(ctx, cs, ns, name)
					delete(exists, key)
				} else {
					labels := map[string]string{"group": []string{"diff", "other"}[rng.IntN(2)]}
					var cm *corev1.ConfigMap
					if cm, err = kubetest.PutConfigMap(ctx, cs, ns, name, int64(i), labels); err == nil {
						v, err = driver.ParseResourceVersion(cm.ResourceVersion)
					}
					exists[key] = true
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d: %s: %w", w, key, err)
					return
				}
				mu.Lock()
				last = max(last, v)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return last
}

// TestDifferential runs client-go's informer and ours side by side on the
// same apiserver while a random workload writes; afterwards both caches hold
// exactly the server's objects and both saw each key's versions in the same
// order.
func TestDifferential(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	nsA := kubetest.CreateNamespace(t, cs, "diff-a")
	nsB := kubetest.CreateNamespace(t, cs, "diff-b")
	seed := uint64(time.Now().UnixNano())
	t.Logf("workload seed %d", seed)

	scopes := []*sideBySide{
		startSideBySide(t, cs, scope{name: "namespace " + nsA, namespace: nsA}),
		// All namespaces, restricted by a label that the workload flips.
		startSideBySide(t, cs, scope{name: "all namespaces, group=diff", selector: "group=diff"}),
	}
	last := workload(t, cs, seed, []string{nsA, nsB}, 240)

	// Read your writes: the last write may not touch a scope at all.
	for _, s := range scopes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := s.ours.WaitFor(ctx, last); err != nil {
			t.Fatalf("%s: WaitFor(%d): %v", s.scope.name, last, err)
		}
		cancel()
		if want, got := serverState(t, cs, s.scope), s.ourState(); !maps.Equal(want, got) {
			t.Errorf("%s: after WaitFor(%d) our cache differs from the server:\n%s", s.scope.name, last, diffStates(got, want))
		}
	}
	for _, s := range scopes {
		s.converge(t, cs)
		cg, ours := s.cgSeen.snapshot(), s.ourSeen.snapshot()
		checkOrder(t, "client-go "+s.scope.name, cg)
		checkOrder(t, "ours "+s.scope.name, ours)
		if !maps.EqualFunc(cg, ours, slices.Equal) {
			var diffs []string
			for _, k := range sortedKeys(cg, ours) {
				if !slices.Equal(cg[k], ours[k]) {
					diffs = append(diffs, fmt.Sprintf("%s: client-go %v, ours %v", k, cg[k], ours[k]))
				}
			}
			t.Errorf("%s: handlers saw different histories (seed %d):\n%s", s.scope.name, seed, strings.Join(diffs, "\n"))
		}
		n := 0
		for _, vs := range ours {
			n += len(vs)
		}
		t.Logf("%s: %d keys, %d notifications, identical for both informers", s.scope.name, len(ours), n)
		if n == 0 {
			t.Errorf("%s: no notifications at all: the workload did not reach this scope", s.scope.name)
		}
	}
}

func sortedKeys(ms ...map[string][]string) []string {
	set := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			set[k] = true
		}
	}
	out := slices.Collect(maps.Keys(set))
	sort.Strings(out)
	return out
}
