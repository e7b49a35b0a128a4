package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Options configures a Sharder. The zero value of every field but ID means
// its default.
type Options struct {
	// ID names this replica among the members (a pod name, a host name);
	// required. Two live replicas cannot share one.
	ID string
	// Weight scales this replica's share (see Member.Weight); 0 means 1.
	Weight float64
	// Shards is the number of virtual shards, the same on every replica
	// and fixed for the deployment's life (changing it moves almost every
	// key). It bounds how finely keys spread: use several times the most
	// replicas you will run. 0 means 64.
	Shards int
	// Lease is the membership lease: a replica that stops renewing (dead,
	// frozen, partitioned) leaves within it and its shards move; a replica
	// that cannot renew stops handing out work for its shards two thirds
	// into it, and gives them up at its end. 0 means 10 s.
	Lease time.Duration
	// DrainTimeout bounds how long a handoff waits for the work in flight
	// on a shard that moves away (Begin without Done) before releasing it
	// anyway. 0 means Lease/3. Work that outlives it is what fencing
	// (the term) is for.
	DrainTimeout time.Duration
	// LoadTimeout bounds a round of Hook calls (a relist of the source
	// through the new shards). 0 means one minute.
	LoadTimeout time.Duration
	// Logger receives membership and handoff events; nil means slog.Default.
	Logger *slog.Logger
	// Observer, when set, sees members, owned shards and handoffs (the
	// status page and metrics: see package shard/shardstatus). AddObserver
	// adds more.
	Observer Observer
}

// Hook is what a Sharder tells of its handoffs, so that a cache loads the
// keys of newly owned shards and drops those of shards that left (see
// Informer).
type Hook interface {
	// Load is called with newly acquired shards before their keys are
	// reported by Owns (Begin hands out work meanwhile: the enter events).
	Load(ctx context.Context, shards []int) error
	// Drop is called with shards whose work has drained, before they are
	// released: their keys leave the cache.
	Drop(ctx context.Context, shards []int) error
}

// Sharder is one replica's part in sharding: it keeps its membership
// alive, computes the assignment, takes the shards it wins (once their
// previous owner released them or lost its lease), hands them back when
// they move, and gates the work done for each key (Begin) so that no two
// replicas work on a key at once.
type Sharder struct {
	b    Backend
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	cond      *sync.Cond    // signalled when in-flight work ends
	slots     map[int]*slot // shards this replica owns
	deadline  time.Time     // the lease, measured locally; zero when not a member
	members   []Member      // as last read
	hooks     []Hook
	observers []Observer
	watchers  []chan struct{}
	started   bool
}

type slot struct {
	term     uint64
	state    slotState
	inflight int
	since    time.Time // when the handoff toward this replica started
}

type slotState uint8

const (
	// loading: taken, its keys being loaded (Begin hands out work: the
	// ownership is exclusive already, and the load's enter events are work).
	loading slotState = iota
	// active: loaded; Owns reports it.
	active
	// draining: moving away; no new work.
	draining
)

// New returns a Sharder over b. It does no I/O; Run joins.
func New(b Backend, opts Options) (*Sharder, error) {
	if b == nil {
		return nil, errors.New("shard: New needs a Backend (NewEtcd, NewPostgres)")
	}
	if opts.ID == "" {
		return nil, errors.New("shard: Options.ID is required (a name unique among the replicas, such as the pod name)")
	}
	if opts.Shards == 0 {
		opts.Shards = 64
	}
	if opts.Shards < 0 {
		return nil, fmt.Errorf("shard: Options.Shards %d is negative", opts.Shards)
	}
	if opts.Lease == 0 {
		opts.Lease = defaultLease
	}
	if opts.Lease < time.Second {
		return nil, fmt.Errorf("shard: Options.Lease %v is below one second", opts.Lease)
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = opts.Lease / 3
	}
	if opts.LoadTimeout == 0 {
		opts.LoadTimeout = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Sharder{b: b, opts: opts, log: opts.Logger.With("replica", opts.ID, "backend", b.String()), slots: map[int]*slot{}}
	if opts.Observer != nil {
		s.observers = append(s.observers, opts.Observer)
	}
	s.cond = sync.NewCond(&s.mu)
	return s, nil
}

// ID is this replica's member ID.
func (s *Sharder) ID() string { return s.opts.ID }

// Shards is the number of virtual shards.
func (s *Sharder) Shards() int { return s.opts.Shards }

// Of returns key's shard.
func (s *Sharder) Of(key string) int { return Of(key, s.opts.Shards) }

// AddHook adds a Hook; add them all before Run.
func (s *Sharder) AddHook(h Hook) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("shard: replica %q: AddHook after Run", s.opts.ID)
	}
	s.hooks = append(s.hooks, h)
	return nil
}

// AddObserver adds an Observer; add them all before Run.
func (s *Sharder) AddObserver(o Observer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("shard: replica %q: AddObserver after Run", s.opts.ID)
	}
	s.observers = append(s.observers, o)
	return nil
}

// Ticket is the permission to work on one key, under its shard's term.
type Ticket struct {
	Shard int
	// Term is the shard's ownership term: hand it to what the work writes,
	// so that a write of a deposed owner is refused (Etcd.Fence,
	// Postgres.Fence).
	Term uint64
	s    *Sharder
}

// Done ends the work Begin allowed; a handoff of the shard waits for it.
func (t Ticket) Done() {
	t.s.mu.Lock()
	if sl := t.s.slots[t.Shard]; sl != nil && sl.term == t.Term {
		sl.inflight--
		if sl.inflight == 0 {
			t.s.cond.Broadcast()
		}
	}
	t.s.mu.Unlock()
}

// Begin asks to work on key: ok when this replica owns key's shard (loaded
// or loading: its enter events are work too), is not handing it off and
// its lease has more than a third left. Call Done on the ticket when the
// work ends. Work that reads the cache for the key (a reconcile) checks
// Owns instead, or as well: during loading the cache may not hold the
// shard's keys yet.
func (s *Sharder) Begin(key string) (Ticket, bool) {
	sh := s.Of(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slots[sh]
	if sl == nil || sl.state == draining || !s.leaseOK(time.Now()) {
		return Ticket{}, false
	}
	sl.inflight++
	return Ticket{Shard: sh, Term: sl.term, s: s}, true
}

// Owns reports whether key's shard is owned, loaded and active here, and
// its term, without starting work.
func (s *Sharder) Owns(key string) (uint64, bool) {
	sh := s.Of(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slots[sh]
	if sl == nil || sl.state != active || !s.leaseOK(time.Now()) {
		return 0, false
	}
	return sl.term, true
}

// leaseOK: more than a third of the lease left, measured from before the
// last successful renewal was sent. s.mu held.
func (s *Sharder) leaseOK(now time.Time) bool {
	return !s.deadline.IsZero() && now.Before(s.deadline.Add(-s.opts.Lease/3))
}

// Owned returns the shards owned and loaded here, with their terms (empty
// once the lease has less than a third left).
func (s *Sharder) Owned() map[int]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leaseOK(time.Now()) {
		return map[int]uint64{}
	}
	return s.ownedLocked()
}

// Members returns the live members as this replica last read them.
func (s *Sharder) Members() []Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.members)
}

// Notify returns a channel that receives (without blocking the Sharder,
// so possibly coalesced) after each change of the shards active here.
func (s *Sharder) Notify() <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.watchers = append(s.watchers, ch)
	s.mu.Unlock()
	return ch
}

func (s *Sharder) notifyLocked() {
	for _, ch := range s.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// defaultLease is Options.Lease's zero value.
const defaultLease = 10 * time.Second
