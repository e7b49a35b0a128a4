package controller_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/leader"
)

// replica is one process of a replicated controller: its own clients,
// informer, controller and manager.
type replica struct {
	name    string
	mgr     *controller.Manager
	ctrl    *controller.Controller[string]
	inf     *core.SharedIndexInformer[Item]
	url     string
	mu      sync.Mutex
	seen    map[string]int // key → spec seen by the last reconcile
	epochs  []uint64
	causes  []error // context causes seen by reconciles that ended early
	hang    chan struct{}
	started chan string
}

func newReplica(t *testing.T, name string, cli, electionCli *clientv3.Client) *replica {
	t.Helper()
	el, err := leader.NewEtcd(electionCli, "/election/items", leader.EtcdOptions{Identity: name, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := controller.NewManager(controller.ManagerOptions{Name: name, Elector: el, Listener: ln})
	lw, err := etcdinformer.NewPrefix(context.Background(), cli, prefix, etcdinformer.Options[Item]{})
	if err != nil {
		t.Fatal(err)
	}
	rp := &replica{name: name, mgr: m, url: "http://" + ln.Addr().String(), seen: map[string]int{},
		hang: make(chan struct{}), started: make(chan string, 16)}
	rp.inf = controller.Informer(m, "items", lw, core.InformerOptions[Item]{})
	rp.ctrl, err = controller.NewManaged(m, "items", controller.Func[string](rp.reconcile), controller.Options[string]{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.Watch(rp.ctrl, rp.inf, controller.ObjectKey[Item](), controller.WatchOptions[Item]{}); err != nil {
		t.Fatal(err)
	}
	return rp
}

func (rp *replica) reconcile(ctx context.Context, key string) (controller.Result, error) {
	term, _ := controller.TermOf(ctx)
	if key == "hang" {
		rp.started <- key
		<-ctx.Done()
		rp.mu.Lock()
		rp.causes = append(rp.causes, context.Cause(ctx))
		rp.mu.Unlock()
		return controller.Result{}, ctx.Err()
	}
	it, _ := rp.inf.Lister().Get(key)
	rp.mu.Lock()
	rp.seen[key] = it.Spec
	rp.epochs = append(rp.epochs, term.Epoch)
	rp.mu.Unlock()
	return controller.Result{}, nil
}

func (rp *replica) reconciled(keys int, spec func(k int) int) bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for k := range keys {
		if rp.seen[keyName(k)] != spec(k) {
			return false
		}
	}
	return true
}

func (rp *replica) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(rp.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLeaderFailoverWarm: two replicas over one etcd. The standby's cache
// is synced and live and its queue holds every key before it wins; when
// the leader stops, the standby reconciles every key — against the
// latest state, including a change made while it stood by — without
// listing again, under a higher epoch. Health, readiness and metrics say
// which replica leads.
func TestLeaderFailoverWarm(t *testing.T) {
	srv, cli := startEtcd(t)
	const keys = 8
	for k := range keys {
		put(t, cli, keyName(k), Item{Spec: 1})
	}
	a := newReplica(t, "a", cli, srv.Client(t))
	stopA := run(t, a.mgr.Run)
	eventually(t, "a leads and reconciles", func() bool { return a.mgr.IsLeader() && a.reconciled(keys, func(int) int { return 1 }) })

	b := newReplica(t, "b", cli, srv.Client(t))
	stopB := run(t, b.mgr.Run)
	eventually(t, "b ready as a warm standby", func() bool {
		code, _ := b.get(t, "/readyz")
		return code == http.StatusOK && b.ctrl.Queue().Len() == keys
	})
	put(t, cli, keyName(0), Item{Spec: 2}) // while b stands by
	eventually(t, "both caches have the change", func() bool {
		ia, _ := a.inf.Lister().Get(keyName(0))
		ib, _ := b.inf.Lister().Get(keyName(0))
		return ia.Spec == 2 && ib.Spec == 2
	})
	if b.mgr.IsLeader() || b.ctrl.Queue().Len() != keys {
		t.Fatalf("standby b: leader %v, %d keys queued (want %d, deduplicated)", b.mgr.IsLeader(), b.ctrl.Queue().Len(), keys)
	}
	b.mu.Lock()
	if len(b.seen) != 0 {
		t.Errorf("standby b reconciled %v", b.seen)
	}
	b.mu.Unlock()
	if code, body := b.get(t, "/readyz"); code != http.StatusOK || body != "ok: standing by, caches synced\n" {
		t.Errorf("standby /readyz %d %q", code, body)
	}
	if code, body := b.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("standby /healthz %d %s", code, body)
	}
	if _, body := b.get(t, "/metrics"); !strings.Contains(body, "dbinformer_controller_leader 0") {
		t.Errorf("standby /metrics lacks dbinformer_controller_leader 0")
	}
	lists := b.inf.SyncStatus()

	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	spec := func(k int) int {
		if k == 0 {
			return 2
		}
		return 1
	}
	eventually(t, "b leads and reconciles every key", func() bool { return b.mgr.IsLeader() && b.reconciled(keys, spec) })
	if got := b.inf.SyncStatus(); !got.RunStarted.Equal(lists.RunStarted) || !got.Synced {
		t.Errorf("b's informer restarted on winning: run started %v, before %v", got.RunStarted, lists.RunStarted)
	}
	a.mu.Lock()
	epochA := a.epochs[0]
	a.mu.Unlock()
	b.mu.Lock()
	for _, e := range b.epochs {
		if e <= epochA {
			t.Errorf("b reconciled under epoch %d, a under %d: want higher", e, epochA)
		}
	}
	b.mu.Unlock()
	if code, body := b.get(t, "/readyz"); code != http.StatusOK || body != "ok: leading\n" {
		t.Errorf("leader /readyz %d %q", code, body)
	}
	_, body := b.get(t, "/metrics")
	for _, want := range []string{
		"dbinformer_controller_leader 1",
		`dbinformer_controller_reconciles_total{controller="items",result="success"}`,
		`dbinformer_workqueue_depth{name="items"}`,
		`dbinformer_informer_listed_objects{informer="items"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
}

// TestLeadershipLostCancelsAtOnce: a leader whose election session dies
// cancels its reconciles in flight at once, with leader.ErrLost as the
// cause, instead of letting them drain: a deposed leader must stop
// writing.
func TestLeadershipLostCancelsAtOnce(t *testing.T) {
	srv, cli := startEtcd(t)
	put(t, cli, "hang", Item{Spec: 1})
	electionCli := srv.Client(t)
	a := newReplica(t, "a", cli, electionCli)
	stopA := run(t, a.mgr.Run)
	<-a.started
	_ = electionCli.Close() // the session cannot be kept alive: leadership lost
	eventually(t, "the hung reconcile cancelled", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.causes) > 0
	})
	a.mu.Lock()
	cause := a.causes[0]
	a.mu.Unlock()
	if !errors.Is(cause, leader.ErrLost) {
		t.Errorf("cause %v, want leader.ErrLost", cause)
	}
	_ = stopA()
}

// TestManagerShutdownOrder: when the manager's context ends, a reconcile
// in flight finishes with a live context while its informer still runs
// (it may still read the cache), and the informer stops only after it.
func TestManagerShutdownOrder(t *testing.T) {
	_, cli := startEtcd(t)
	put(t, cli, "slow", Item{Spec: 1})
	m := controller.NewManager(controller.ManagerOptions{Name: "order"})
	lw, err := etcdinformer.NewPrefix(context.Background(), cli, prefix, etcdinformer.Options[Item]{})
	if err != nil {
		t.Fatal(err)
	}
	inf := controller.Informer(m, "items", lw, core.InformerOptions[Item]{})
	started, release := make(chan struct{}), make(chan struct{})
	type seen struct {
		ctxErr          error
		informerRunning bool
		readDuringDrain bool
	}
	got := make(chan seen, 1)
	if _, err := controller.For(m, inf, controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		close(started)
		<-release
		_, ok := inf.Lister().Get(key)
		got <- seen{ctx.Err(), inf.SyncStatus().Running, ok}
		return controller.Result{}, nil
	}), controller.Options[string]{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	<-started
	cancel()
	close(release)
	s := <-got
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if s.ctxErr != nil || !s.informerRunning || !s.readDuringDrain {
		t.Errorf("during the drain: reconcile context %v, informer running %v, cache read %v", s.ctxErr, s.informerRunning, s.readDuringDrain)
	}
	if inf.SyncStatus().Running {
		t.Error("informer still running after Run returned")
	}
}
