package informertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// LossKind is a way a Lossy source's watch lies.
type LossKind string

// The lies a Lossy tells.
const (
	// LossDrop drops a change: an add leaves the key missing from the
	// cache, an update leaves it stale, a delete leaves it extra.
	LossDrop LossKind = "drop"
	// LossAlter delivers a change with another value: LossyOptions.Alter's,
	// or without one the object of the previous change of another key.
	LossAlter LossKind = "alter"
	// LossStale delivers an update and, after it in the same batch, the
	// key's previous object again, as a replica replaying an old write
	// would: the cache ends with the stale object. An update is a Modified
	// event, or an Added one for a key whose object the Lossy delivered
	// before (a stateless source, such as a relay Downstream, reports
	// every put as Added and leaves adds and updates to the cache).
	LossStale LossKind = "stale"
)

// Loss is one lie a Lossy told.
type Loss struct {
	Kind LossKind
	Key  string
	RV   core.ResourceVersion
	Type driver.EventType // the change it lied about
}

func (l Loss) String() string {
	return fmt.Sprintf("%s %s %q at version %d", l.Kind, l.Type, l.Key, l.RV)
}

// LossyOptions configures a Lossy.
type LossyOptions[T any] struct {
	// Seed seeds the choice of changes to lie about when Rate is set.
	Seed uint64
	// Rate is the probability that a watched change is lied about, with
	// a kind chosen at random among those that apply; 0 lies only when
	// armed (Lossy.Arm).
	Rate float64
	// Alter returns a changed copy of an object, for LossAlter.
	Alter func(T) T
}

// Lossy wraps a ListerWatcher and makes its Watch lose, alter and replay
// changes, seeded or on demand, to prove that the consistency audit
// (core.InformerOptions.Audit) finds every such divergence. List and every
// optional capability pass through untouched (Unwrap), AuditList
// included: the audit sees the source's truth while the cache is fed lies.
type Lossy[T any] struct {
	lw   driver.ListerWatcher[T]
	opts LossyOptions[T]

	mu     sync.Mutex
	rng    *rand.Rand
	armed  []LossKind
	last   map[string]driver.Event[T] // each key's last change delivered
	prev   *driver.Event[T]           // the last change delivered, any key
	losses []Loss
}

// NewLossy returns a Lossy around lw.
func NewLossy[T any](lw driver.ListerWatcher[T], opts LossyOptions[T]) *Lossy[T] {
	return &Lossy[T]{lw: lw, opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)), last: map[string]driver.Event[T]{}}
}

// Unwrap returns the wrapped ListerWatcher, for driver.Capability.
func (l *Lossy[T]) Unwrap() driver.ListerWatcher[T] { return l.lw }

// Arm makes the Lossy tell lie k about the next watched change it
// applies to (LossStale waits for an update of a key it saw before).
func (l *Lossy[T]) Arm(k LossKind) {
	l.mu.Lock()
	l.armed = append(l.armed, k)
	l.mu.Unlock()
}

// Losses returns the lies told so far.
func (l *Lossy[T]) Losses() []Loss {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Loss(nil), l.losses...)
}

// List implements driver.ListerWatcher; it tells no lies.
func (l *Lossy[T]) List(ctx context.Context, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[T]) error {
		l.mu.Lock()
		l.last[ev.Key] = ev
		l.mu.Unlock()
		return emit(ev)
	}
	return l.lw.List(ctx, sink)
}

// Watch implements driver.ListerWatcher.
func (l *Lossy[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	emit := opts.Emit
	var out []driver.Event[T]
	opts.Emit = func(batch []driver.Event[T]) error {
		out = l.lie(out[:0], batch)
		if len(out) == 0 {
			// Everything was dropped: a bookmark keeps the version moving,
			// so that waits for it do not hang on the lie.
			out = append(out, driver.Event[T]{Type: driver.Bookmark, RV: batch[len(batch)-1].RV})
		}
		return emit(out)
	}
	return l.lw.Watch(ctx, from, opts)
}

func (l *Lossy[T]) lie(out, batch []driver.Event[T]) []driver.Event[T] {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range batch {
		if ev.Type == driver.Bookmark || ev.Err != nil {
			out = append(out, ev)
			continue
		}
		prevOfKey, seen := l.last[ev.Key]
		kind, ok := l.choose(ev, seen && prevOfKey.HasObject)
		if ev.Type == driver.Deleted {
			delete(l.last, ev.Key)
		} else {
			l.last[ev.Key] = ev
		}
		if !ok {
			out = append(out, ev)
			if ev.HasObject {
				e := ev
				l.prev = &e
			}
			continue
		}
		l.losses = append(l.losses, Loss{Kind: kind, Key: ev.Key, RV: ev.RV, Type: ev.Type})
		switch kind {
		case LossDrop:
		case LossAlter:
			if l.opts.Alter != nil {
				ev.Object = l.opts.Alter(ev.Object)
			} else {
				ev.Object = l.prev.Object
			}
			out = append(out, ev)
		case LossStale:
			stale := prevOfKey
			stale.Type, stale.RV = driver.Modified, ev.RV
			out = append(out, ev, stale)
		}
	}
	return out
}

// choose says whether to lie about ev and how: an armed lie first, else
// one at Rate.
func (l *Lossy[T]) choose(ev driver.Event[T], hasPrev bool) (LossKind, bool) {
	can := func(k LossKind) bool {
		switch k {
		case LossAlter:
			return ev.Type != driver.Deleted && (l.opts.Alter != nil || (l.prev != nil && l.prev.Key != ev.Key))
		case LossStale:
			// An Added of a key seen before is an update from a source
			// that cannot tell them apart (a stateless event stream).
			return ev.Type != driver.Deleted && hasPrev
		}
		return true
	}
	for i, k := range l.armed {
		if can(k) {
			l.armed = append(l.armed[:i], l.armed[i+1:]...)
			return k, true
		}
	}
	if l.opts.Rate <= 0 || l.rng.Float64() >= l.opts.Rate {
		return "", false
	}
	kinds := []LossKind{LossDrop, LossAlter, LossStale}
	k := kinds[l.rng.IntN(len(kinds))]
	if !can(k) {
		k = LossDrop
	}
	return k, true
}
