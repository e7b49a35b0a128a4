package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/shard"
	"github.com/dbinformer/dbinformer/shard/shardstatus"
)

// ManagerOptions configures a Manager. The zero value of every field means
// its default.
type ManagerOptions struct {
	// Name names the manager on its status page and in logs.
	Name string
	// Elector, when set, runs the controllers only while this replica
	// leads (leader.NewEtcd, NewPostgres, NewKube). Informers run and
	// controllers' queues fill on every replica whatever the election
	// says — warm replicas — so a new leader reconciles at once. nil: this
	// replica always leads.
	Elector leader.Elector
	// Sharder, when set, runs the manager in sharded mode (see
	// shard.Sharder): every replica runs its controllers, each reconciling
	// only the keys of the shards it owns; build the informers over
	// shard.NewSource so that each caches only its shards. Exclusive with
	// Elector.
	Sharder *shard.Sharder
	// Listener, when set, serves /healthz, /readyz, /metrics and the
	// status page under /debug/informers/ until Run returns. Handler
	// serves the same on a server of the program's own.
	Listener net.Listener
	// Addr, when set and Listener is not, is where Run listens for the
	// same; it logs the address (useful with port 0).
	Addr string
	// SyncTimeout bounds the wait for the informers' initial sync; the
	// error says which informer is behind and why. 0 means no bound.
	SyncTimeout time.Duration
	// DrainTimeout is how long reconciles in flight may go on after Run's
	// context ends (Options.DrainTimeout of controllers that do not set
	// their own); 0 means 30 s.
	DrainTimeout time.Duration
	Logger       *slog.Logger
}

// Runnable is a controller as a Manager runs it; every *Controller[K] is
// one, whatever K.
type Runnable interface {
	Name() string
	Run(ctx context.Context) error
	WaitForCacheSync(ctx context.Context) error
	ShutDown()
}

var _ Runnable = (*Controller[string])(nil)

// Manager runs informers and controllers as one program: it starts the
// informers of its Factory, waits for their sync, campaigns for
// leadership (if it has an Elector) while keeping caches and queues live,
// runs the controllers while it leads, serves health, readiness, metrics
// and the status page, and stops in order: intake, in-flight reconciles
// (within the drain timeout), queues, informers.
//
// In sharded mode (ManagerOptions.Sharder) there is no leader: every
// replica runs its controllers on the keys of the shards it owns
// (manager_shard.go).
type Manager struct {
	opts        ManagerOptions
	log         *slog.Logger
	factory     *core.Factory
	obs         *observability
	controllers []Runnable
	started     atomic.Bool

	leading  atomic.Bool
	electing atomic.Bool // the election loop runs (standby or leader)

	shardStatus *shardstatus.Recorder // sharded mode only
}

// NewManager returns a manager. It does no I/O.
func NewManager(opts ManagerOptions) *Manager {
	m := &Manager{opts: opts, log: opts.Logger, factory: core.NewFactory()}
	if m.log == nil {
		m.log = slog.Default()
	}
	if opts.Name == "" {
		m.opts.Name = "controller-manager"
	}
	m.obs = newObservability(m)
	m.initSharded()
	return m
}

// Factory is the manager's informer factory; Informer adds to it with the
// manager's metrics and status page wired in.
func (m *Manager) Factory() *core.Factory { return m.factory }

// Add adds a controller to run. Add all before Run.
func (m *Manager) Add(c Runnable) error {
	if m.started.Load() {
		return fmt.Errorf("controller manager %q: Add of %q after Run", m.opts.Name, c.Name())
	}
	m.controllers = append(m.controllers, c)
	return nil
}

// NewManaged is New with the manager's metrics, status page and logger
// wired in (where opts leaves them unset), and the controller added to m.
func NewManaged[K comparable](m *Manager, name string, r Reconciler[K], opts Options[K]) (*Controller[K], error) {
	if opts.Logger == nil {
		opts.Logger = m.log
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = m.opts.DrainTimeout
	}
	m.obs.wireController(name, &opts.QueueMetrics, &opts.Metrics)
	c := New(name, r, opts)
	if err := m.Add(c); err != nil {
		return nil, err
	}
	return c, nil
}

// IsLeader reports whether this replica leads now.
func (m *Manager) IsLeader() bool { return m.leading.Load() }

type termKey struct{}

// TermOf returns the leadership term a reconcile runs under, when its
// controller runs in a Manager with an Elector: hand Term.Epoch to what
// the reconcile writes, so that the writes of a deposed leader still
// running for a moment can be refused (see package leader, Fencing).
func TermOf(ctx context.Context) (leader.Term, bool) {
	t, ok := ctx.Value(termKey{}).(leader.Term)
	return t, ok
}

// Run runs everything until ctx ends, then stops it in order and returns
// nil; or returns the first error that stops it early (an informer that
// failed for good before syncing, a sync timeout, a controller's error),
// after stopping the rest.
func (m *Manager) Run(ctx context.Context) (err error) {
	if !m.started.CompareAndSwap(false, true) {
		return fmt.Errorf("controller manager %q: Run called twice", m.opts.Name)
	}
	if m.opts.Sharder != nil && m.opts.Elector != nil {
		return fmt.Errorf("controller manager %q: ManagerOptions.Sharder and Elector are exclusive (sharded replicas have no leader)", m.opts.Name)
	}
	ln := m.opts.Listener
	if ln == nil && m.opts.Addr != "" {
		if ln, err = net.Listen("tcp", m.opts.Addr); err != nil {
			return fmt.Errorf("controller manager %q: serve health and metrics: %w", m.opts.Name, err)
		}
		url := "http://" + ln.Addr().String()
		m.log.Info("serving "+url+" (/healthz, /readyz, /metrics, /debug/informers/)", "manager", m.opts.Name, "url", url)
	}
	stopHTTP := m.obs.serve(ln)
	// Informers outlive ctx: they stop last, after the controllers have
	// drained (a draining reconcile still reads the caches).
	m.factory.Start(context.WithoutCancel(ctx))
	defer func() {
		for _, c := range m.controllers {
			c.ShutDown()
		}
		m.factory.Shutdown()
		stopHTTP()
	}()
	if err := m.waitSynced(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	m.log.Info("caches synced", "manager", m.opts.Name, "controllers", len(m.controllers))
	if m.opts.Sharder != nil {
		return m.runSharded(ctx)
	}
	if m.opts.Elector == nil {
		return m.lead(ctx, nil)
	}
	m.electing.Store(true)
	defer m.electing.Store(false)
	return m.opts.Elector.Run(ctx, func(lctx context.Context, t leader.Term) error {
		return m.lead(lctx, &t)
	})
}

func (m *Manager) waitSynced(ctx context.Context) error {
	if m.opts.SyncTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, m.opts.SyncTimeout, core.ErrSyncTimeout)
		defer cancel()
	}
	if err := m.factory.WaitForCacheSync(ctx); err != nil {
		return err
	}
	for _, c := range m.controllers {
		if err := c.WaitForCacheSync(ctx); err != nil {
			return err
		}
	}
	return nil
}

// lead runs every controller until ctx ends (the stop, or a lost
// leadership: then Controller.Run cancels reconciles at once) or one of
// them fails; it returns that failure.
func (m *Manager) lead(ctx context.Context, t *leader.Term) error {
	if t != nil {
		ctx = context.WithValue(ctx, termKey{}, *t)
		m.log.Info("leading: starting controllers", "manager", m.opts.Name, "epoch", t.Epoch)
	}
	m.leading.Store(true)
	m.obs.setLeader(true)
	defer func() {
		m.leading.Store(false)
		m.obs.setLeader(false)
	}()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errs := make([]error, len(m.controllers))
	var wg sync.WaitGroup
	for i, c := range m.controllers {
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				errs[i] = err
				cancel(err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Ready reports whether the manager can do its work: every informer
// synced, and, with an Elector, the election running (leading or standing
// by warm). A standby is ready: it is what takes over.
func (m *Manager) Ready(ctx context.Context) error {
	if err := m.obs.ready(ctx); err != nil {
		return err
	}
	if m.opts.Elector != nil && !m.electing.Load() {
		return fmt.Errorf("controller manager %q: not campaigning for leadership (not started, still syncing, or stopped)", m.opts.Name)
	}
	return nil
}

// For is the common case in one call, after controller-runtime's builder
// For: a controller in m, named after inf, that reconciles the keys of
// inf's own objects.
func For[T any](m *Manager, inf *core.SharedIndexInformer[T], r Reconciler[string], opts Options[string]) (*Controller[string], error) {
	c, err := NewManaged(m, inf.Name(), r, opts)
	if err != nil {
		return nil, err
	}
	if err := Watch(c, inf, ObjectKey[T](), WatchOptions[T]{}); err != nil {
		return nil, err
	}
	return c, nil
}
