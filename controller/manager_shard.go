package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/shard"
	"github.com/dbinformer/dbinformer/shard/shardstatus"
)

// Sharded mode: with ManagerOptions.Sharder, every replica runs its
// controllers at once, each reconciling only the keys of the shards its
// Sharder owns — instead of one leader reconciling every key. Keys of
// shards not owned here are dropped when a worker takes them (never
// reconciled: their owner does it), keys of a shard still loading wait for
// it, and a reconcile runs under a shard.Ticket, which a handoff of the
// shard waits for (up to shard.Options.DrainTimeout) and whose term
// ShardTicketOf gives the reconcile to fence its writes.

// loadingRetry is how soon a key of a shard still loading is tried again.
const loadingRetry = 100 * time.Millisecond

// shardable is a controller that can run sharded: every *Controller[K]
// whose keys are strings or have a ShardKey method.
type shardable interface {
	shardBy(s *shard.Sharder) error
}

// ShardKeyer is a controller key that is not a string: ShardKey says which
// key of the source it stands for, whose shard decides who reconciles it.
type ShardKeyer interface {
	ShardKey() string
}

func (c *Controller[K]) shardBy(s *shard.Sharder) error {
	var keyOf func(K) string
	switch any(*new(K)).(type) {
	case string:
		keyOf = func(k K) string { return any(k).(string) }
	case ShardKeyer:
		keyOf = func(k K) string { return any(k).(ShardKeyer).ShardKey() }
	default:
		return fmt.Errorf("controller %q: sharded mode needs keys that are strings or have a ShardKey() string method; %T has neither", c.name, *new(K))
	}
	c.r = shardGate[K]{s: s, keyOf: keyOf, next: c.r}
	return nil
}

type shardGate[K comparable] struct {
	s     *shard.Sharder
	keyOf func(K) string
	next  Reconciler[K]
}

type ticketKey struct{}

// ShardTicketOf returns the shard and term a reconcile runs under, when its
// controller runs in a Manager in sharded mode: hand Term to what the
// reconcile writes (shard.Etcd.Fence, shard.Postgres.Fence) so that the
// writes of a deposed owner are refused.
func ShardTicketOf(ctx context.Context) (shard.Ticket, bool) {
	t, ok := ctx.Value(ticketKey{}).(shard.Ticket)
	return t, ok
}

func (g shardGate[K]) Reconcile(ctx context.Context, key K) (Result, error) {
	k := g.keyOf(key)
	t, ok := g.s.Begin(k)
	if !ok {
		return Result{}, nil // not ours (any more): its owner reconciles it
	}
	defer t.Done()
	if _, loaded := g.s.Owns(k); !loaded {
		// Taken, its keys still arriving: the cache may not hold key yet.
		return Result{RequeueAfter: loadingRetry}, nil
	}
	return g.next.Reconcile(context.WithValue(ctx, ticketKey{}, t), key)
}

// initSharded makes the shard status of a sharded manager, its metrics on
// the manager's registry (its own: nothing can collide, hence the panic).
func (m *Manager) initSharded() {
	if m.opts.Sharder == nil {
		return
	}
	m.shardStatus = shardstatus.New(m.opts.Sharder.ID())
	if err := m.shardStatus.Register(m.obs.reg); err != nil {
		panic("controller: register the shard metrics: " + err.Error())
	}
}

// ShardStatus is the shard status of a manager in sharded mode (nil
// otherwise): members, shards owned here, handoffs in progress and recent
// ones. It is an http.Handler serving them as JSON: mount it beside
// Handler, for example at /debug/shards. Its metrics
// (dbinformer_shard_*) are on Registry.
func (m *Manager) ShardStatus() *shardstatus.Recorder { return m.shardStatus }

// runSharded runs the Sharder beside the controllers, which run from the
// start on every replica (each reconciling only its shards' keys). The
// controllers stop first; then the Sharder hands its shards off, while the
// informers still run (a handoff relists them).
func (m *Manager) runSharded(ctx context.Context) error {
	s := m.opts.Sharder
	if err := s.AddObserver(m.shardStatus); err != nil {
		return fmt.Errorf("controller manager %q: %w (give the manager a Sharder that is not running)", m.opts.Name, err)
	}
	for _, c := range m.controllers {
		sc, ok := c.(shardable)
		if !ok {
			return fmt.Errorf("controller manager %q: controller %q cannot run sharded (not a *controller.Controller)", m.opts.Name, c.Name())
		}
		if err := sc.shardBy(s); err != nil {
			return fmt.Errorf("controller manager %q: %w", m.opts.Name, err)
		}
	}
	m.log.Info("sharded: starting controllers", "manager", m.opts.Name, "replica", s.ID(), "shards", s.Shards())
	sctx, stopSharder := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var serr error
	wg.Go(func() { serr = s.Run(sctx) })
	err := m.lead(ctx, nil)
	stopSharder()
	wg.Wait()
	return errors.Join(err, serr)
}
