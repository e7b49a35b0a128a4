package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// ErrDuplicateKey is returned by Apply when two operations name the same
// key: a transaction that writes a key twice has no single resulting event.
var ErrDuplicateKey = errors.New("memory: key written twice in one transaction")

// ErrFutureVersion is returned by Compact for a version after the head.
var ErrFutureVersion = errors.New("memory: version after the head")

const defaultMaxBatch = 1000

// Options configures a Source. The zero value is ready to use.
type Options struct {
	// Name identifies the source in errors (DecodeError.Source).
	// Empty means "memory".
	Name string
	// MaxBatch caps the events of one batch a watch emits; a transaction is never
	// split, so a batch may exceed it by the rest of one transaction.
	// Zero means 1000.
	MaxBatch int
	// DeletesWithoutObject makes Deleted events carry only the key
	// (HasObject false), like a Postgres table with REPLICA IDENTITY DEFAULT,
	// so that tests cover the informer filling in the last object.
	DeletesWithoutObject bool
	// HistoryLimit, when positive, compacts automatically so that at most
	// about this many events stay watchable (whole transactions are dropped,
	// so a little more may remain), as a database with a retention window
	// does: a watch that falls behind it gets driver.ErrExpired.
	HistoryLimit int
}

// Op is one write of a transaction passed to Apply.
type Op[T any] struct {
	Key    string
	Object T    // the new object; ignored when Delete is set
	Delete bool // remove Key instead of writing Object
}

// PutOp is an Op that creates or replaces key.
func PutOp[T any](key string, obj T) Op[T] { return Op[T]{Key: key, Object: obj} }

// DeleteOp is an Op that removes key.
func DeleteOp[T any](key string) Op[T] { return Op[T]{Key: key, Delete: true} }

type item[T any] struct {
	obj T
	rv  core.ResourceVersion // version of the write that produced obj
	bad error                // set by InjectDecodeError: the value does not decode
}

// Source is an in-memory versioned map that implements driver.ListerWatcher
// and driver.HeadReader. Objects are stored as given: do not mutate an object
// after passing it to Put or Apply, since List and Watch hand out the same
// value. All methods are safe for concurrent use.
type Source[T any] struct {
	name     string
	maxBatch int
	noDelObj bool
	limit    int

	mu        sync.Mutex
	head      core.ResourceVersion
	compacted core.ResourceVersion // Watch(from) needs from >= compacted
	items     map[string]item[T]
	history   []driver.Event[T] // every event with RV > compacted, RV ascending
	// changed is closed and replaced on every state change, so that a
	// waiting watch wakes up without a goroutine per waiter.
	changed  chan struct{}
	watchers map[*watcher[T]]struct{} // open watches, for NotifyProgress and Compact
}

var (
	_ driver.ListerWatcher[int] = (*Source[int])(nil)
	_ driver.HeadReader         = (*Source[int])(nil)
	_ driver.ProgressReporter   = (*Source[int])(nil)
)

// New returns an empty Source at version 0.
func New[T any](opts Options) *Source[T] {
	name := opts.Name
	if name == "" {
		name = "memory"
	}
	mb := opts.MaxBatch
	if mb <= 0 {
		mb = defaultMaxBatch
	}
	return &Source[T]{
		name:     name,
		maxBatch: mb,
		noDelObj: opts.DeletesWithoutObject,
		limit:    opts.HistoryLimit,
		items:    make(map[string]item[T]),
		changed:  make(chan struct{}),
		watchers: make(map[*watcher[T]]struct{}),
	}
}

func (s *Source[T]) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Put creates or replaces key and returns the version of the write. The
// watch reports Added when the key was absent and Modified otherwise.
func (s *Source[T]) Put(key string, obj T) core.ResourceVersion {
	rv, _ := s.Apply(PutOp(key, obj))
	return rv
}

// Delete removes key and returns the version of the delete and true. When
// the key is absent nothing is written: it returns the head and false.
func (s *Source[T]) Delete(key string) (core.ResourceVersion, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.items[key]; !ok {
		return s.head, false
	}
	return s.applyLocked([]Op[T]{DeleteOp[T](key)}), true
}

// Apply writes ops as one transaction: every resulting event shares one
// version and arrives in one batch. Deletes of absent keys produce no event;
// when no op changes anything the head does not move and Apply returns it.
func (s *Source[T]) Apply(ops ...Op[T]) (core.ResourceVersion, error) {
	seen := make(map[string]struct{}, len(ops))
	for _, op := range ops {
		if _, dup := seen[op.Key]; dup {
			return 0, fmt.Errorf("%w: %q", ErrDuplicateKey, op.Key)
		}
		seen[op.Key] = struct{}{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(ops), nil
}

func (s *Source[T]) applyLocked(ops []Op[T]) core.ResourceVersion {
	rv := s.head + 1
	n := 0
	for _, op := range ops {
		old, existed := s.items[op.Key]
		ev := driver.Event[T]{Key: op.Key, RV: rv}
		switch {
		case op.Delete && !existed:
			continue
		case op.Delete:
			delete(s.items, op.Key)
			ev.Type = driver.Deleted
			if !s.noDelObj && old.bad == nil {
				ev.Object, ev.HasObject = old.obj, true
			}
		default:
			s.items[op.Key] = item[T]{obj: op.Object, rv: rv}
			ev.Type = driver.Added
			if existed {
				ev.Type = driver.Modified
			}
			ev.Object, ev.HasObject = op.Object, true
		}
		s.history = append(s.history, ev)
		n++
	}
	if n == 0 {
		return s.head
	}
	s.head = rv
	s.trimLocked()
	s.notifyLocked()
	return rv
}

// trimLocked enforces HistoryLimit.
func (s *Source[T]) trimLocked() {
	if s.limit <= 0 || len(s.history) <= s.limit {
		return
	}
	s.compactLocked(s.history[len(s.history)-s.limit-1].RV)
}

func (s *Source[T]) compactLocked(rv core.ResourceVersion) {
	s.compacted = rv
	i := sort.Search(len(s.history), func(i int) bool { return s.history[i].RV > rv })
	s.history = slices.Delete(s.history, 0, i)
	// A watch that had not delivered up to rv has lost events: it ends
	// and returns why.
	for w := range s.watchers {
		if w.pos < rv {
			s.endLocked(w, s.expiredLocked(w.pos))
		}
	}
}

// Advance moves the head one version forward without changing any key, as
// a write to an unwatched table or prefix would, and returns the new head.
// Watchers see nothing until they ask for progress.
func (s *Source[T]) Advance() core.ResourceVersion {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.head++
	s.notifyLocked()
	return s.head
}

// InjectDecodeError writes to key a value that does not decode, as a
// producer's new deploy might, and returns its version: the watch reports
// a Modified (Added for a new key) event whose Err is a *driver.DecodeError
// wrapping err, and List reports the key with that error too, until the
// next Put or Delete of key. Get and Items leave the key out (what a cache
// can hold of the source); a Delete of it carries no object.
func (s *Source[T]) InjectDecodeError(key string, err error) core.ResourceVersion {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.head++
	typ := driver.Added
	if _, ok := s.items[key]; ok {
		typ = driver.Modified
	}
	de := &driver.DecodeError{Source: s.name, Key: key, RV: s.head, Err: err}
	s.items[key] = item[T]{rv: s.head, bad: de}
	s.history = append(s.history, driver.Event[T]{Type: typ, Key: key, RV: s.head, Err: de})
	s.trimLocked()
	s.notifyLocked()
	return s.head
}

// Compact discards the history up to and including rv: afterwards Watch
// from any version before rv fails with an error matching driver.ErrExpired,
// and so does an open watch that had not yet emitted up to rv.
// Compacting to a version at or below an earlier compaction does nothing.
func (s *Source[T]) Compact(rv core.ResourceVersion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rv > s.head {
		return fmt.Errorf("memory: compact to %d: %w %d", rv, ErrFutureVersion, s.head)
	}
	if rv <= s.compacted {
		return nil
	}
	s.compactLocked(rv)
	s.notifyLocked()
	return nil
}

// HeadRV returns the version of the latest write.
func (s *Source[T]) HeadRV() core.ResourceVersion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head
}

// Head implements driver.HeadReader.
func (s *Source[T]) Head(ctx context.Context) (core.ResourceVersion, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.HeadRV(), nil
}

// CompactedRV returns the version up to which history was discarded.
func (s *Source[T]) CompactedRV() core.ResourceVersion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compacted
}

// Get returns the current object for key.
func (s *Source[T]) Get(key string) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[key]
	return it.obj, ok && it.bad == nil
}

// Items returns a copy of the live keys and their objects with the version
// they were read at, so that a test can compare an informer's cache with
// the source once the cache has reached that version.
func (s *Source[T]) Items() (map[string]T, core.ResourceVersion) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]T, len(s.items))
	for k, it := range s.items {
		if it.bad == nil {
			m[k] = it.obj
		}
	}
	return m, s.head
}

// Len returns the number of live keys.
func (s *Source[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// NotifyProgress asks every open watch for a Bookmark, as a periodic etcd
// progress notification would.
func (s *Source[T]) NotifyProgress() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		w.progress = true
	}
	s.notifyLocked()
}

// List emits every live key as an Added event carrying the version of its
// last write, in key order, and returns the head at the time of the
// snapshot. The snapshot is taken under the lock, so writes racing with
// List land either wholly before or wholly after it.
func (s *Source[T]) List(ctx context.Context, opts driver.ListSink[T]) (core.ResourceVersion, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	rv := s.head
	keys := make([]string, 0, len(s.items))
	for k := range s.items {
		keys = append(keys, k)
	}
	snap := make([]driver.Event[T], 0, len(keys))
	slices.Sort(keys)
	for _, k := range keys {
		it := s.items[k]
		ev := driver.Event[T]{Type: driver.Added, Key: k, Object: it.obj, HasObject: true, RV: it.rv}
		if it.bad != nil {
			var zero T
			ev.Object, ev.HasObject, ev.Err = zero, false, it.bad
		}
		snap = append(snap, ev)
	}
	s.mu.Unlock()

	if opts.Estimate != nil {
		opts.Estimate(int64(len(snap)))
	}
	if opts.Emit == nil {
		return rv, nil
	}
	for i, ev := range snap {
		// Checking every item would cost more than the emit itself for
		// small objects; a few hundred items is prompt enough.
		if i%256 == 255 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		if err := opts.Emit(ev); err != nil {
			return 0, err
		}
	}
	return rv, nil
}

// ReportsProgress implements driver.ProgressReporter: a watch answers each
// request on WatchOptions.Progress with a Bookmark at the head, once it has
// emitted every pending event.
func (s *Source[T]) ReportsProgress() bool { return true }

// Watch emits the retained history after from and then every new write,
// until ctx is done (it returns driver.Stopped(ctx)), the watch falls behind
// a compaction (an error matching driver.ErrExpired; from before the
// compacted version fails at once), or Emit fails (its error is returned).
func (s *Source[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	if ctx.Err() != nil {
		return driver.Stopped(ctx)
	}
	s.mu.Lock()
	if from < s.compacted {
		err := s.expiredLocked(from)
		s.mu.Unlock()
		return err
	}
	w := &watcher[T]{pos: from}
	s.watchers[w] = struct{}{}
	s.notifyLocked()
	s.mu.Unlock()

	var batch []driver.Event[T]
	for {
		select {
		case <-opts.Progress:
			s.mu.Lock()
			w.progress = true
			s.mu.Unlock()
		default:
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			s.endLocked(w, nil)
			s.mu.Unlock()
			return driver.Stopped(ctx)
		}
		if w.err != nil {
			err := w.err
			s.mu.Unlock()
			return err
		}
		batch = w.collectLocked(s, batch[:0])
		ch := s.changed
		s.mu.Unlock()
		if len(batch) > 0 {
			err := opts.Emit(batch)
			clear(batch)
			if ctx.Err() != nil {
				s.mu.Lock()
				s.endLocked(w, nil)
				s.mu.Unlock()
				return driver.Stopped(ctx)
			}
			if err != nil {
				s.mu.Lock()
				s.endLocked(w, err)
				s.mu.Unlock()
				return err
			}
			continue
		}
		select {
		case <-ch:
		case <-opts.Progress:
			s.mu.Lock()
			w.progress = true
			s.mu.Unlock()
		case <-ctx.Done():
		}
	}
}

func (s *Source[T]) expiredLocked(from core.ResourceVersion) error {
	return fmt.Errorf("%s: watch from version %d: history compacted up to %d: %w", s.name, from, s.compacted, driver.ErrExpired)
}

// endLocked makes err the watch's final answer, unless it already has one,
// and stops counting it as open.
func (s *Source[T]) endLocked(w *watcher[T], err error) {
	if w.err == nil {
		w.err = err
	}
	if _, ok := s.watchers[w]; ok {
		delete(s.watchers, w)
		s.notifyLocked()
	}
}

// watcher is one open watch's state, guarded by Source.mu.
type watcher[T any] struct {
	pos      core.ResourceVersion // every change up to pos was emitted
	progress bool                 // a Bookmark is owed
	err      error                // set once the watch has ended
}

// collectLocked appends to batch the pending events after the watch's
// position, at most MaxBatch of them (never splitting a transaction), and
// a Bookmark when one is owed and nothing else is pending.
func (w *watcher[T]) collectLocked(s *Source[T], batch []driver.Event[T]) []driver.Event[T] {
	h := s.history
	i := sort.Search(len(h), func(i int) bool { return h[i].RV > w.pos })
	j := min(i+s.maxBatch, len(h))
	for j < len(h) && j > i && h[j].RV == h[j-1].RV {
		j++ // never split a transaction
	}
	if j > i {
		batch = append(batch, h[i:j]...)
		w.pos = h[j-1].RV
	}
	if w.progress && j == len(h) {
		w.progress = false
		// The head can be past the last event (Advance); it can also be
		// behind pos for a watch from a future version, which must never
		// see its position go backwards.
		rv := max(s.head, w.pos)
		batch = append(batch, driver.Event[T]{Type: driver.Bookmark, RV: rv})
		w.pos = rv
	}
	return batch
}

// AuditList implements driver.AuditLister: the snapshot List reads, which
// touches nothing a watch keeps. The head never goes back, so it is
// always at least atLeast.
func (s *Source[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	return s.List(ctx, sink)
}
