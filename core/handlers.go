package core

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime/debug"
	"sync"
	"time"
)

// ResourceEventHandler receives the changes of an informer's cache, one
// key's changes in order. Calls for one handler never overlap; a slow
// handler delays only itself (see HandlerOptions.MaxPending).
type ResourceEventHandler[T any] interface {
	// OnAdd: key entered the cache. isInInitialList is true for objects
	// of the informer's first list, and for the replay of the cache that a
	// handler added later receives.
	OnAdd(key string, obj T, isInInitialList bool)
	// OnUpdate: key changed, or (oldObj equal to newObj) a periodic resync
	// or a relist replayed it.
	OnUpdate(key string, oldObj, newObj T)
	// OnDelete: key left the cache. obj is the last state: the source's
	// when it sent one, the cache's otherwise. finalStateUnknown is
	// client-go's DeletedFinalStateUnknown: the delete was inferred by a
	// relist because it happened while the watch was down, so obj may be
	// older than what the source deleted. It is also set when the key
	// left because its newest state did not decode (UndecodablePolicy):
	// obj is then the last state that did, and the *driver.DecodeError went to
	// the informer's ErrorHandler.
	OnDelete(key string, obj T, finalStateUnknown bool)
}

// HandlerOptions configures one handler registration.
type HandlerOptions struct {
	// Name names the handler in errors, metrics and the status page. Empty
	// means the handler's own name: ResourceEventHandlerFuncs.Name, or the
	// HandlerName() of a handler type that has that method; else its type
	// and registration number.
	Name string
	// ResyncPeriod requests periodic OnUpdate(obj, obj) replays: 0 uses
	// the informer's ResyncPeriod, a negative value disables them.
	// client-go's rules apply: at least 1s; once the informer started, at
	// least its resync check period; before, a smaller period lowers that
	// period.
	ResyncPeriod time.Duration
	// MaxPending bounds the notifications waiting for this handler. When
	// full, the informer blocks (it never drops): the cache stops being
	// updated until the handler catches up. 0 means unbounded.
	MaxPending int
}

// MinimumResyncPeriod is the smallest handler resync period, as in
// client-go.
const MinimumResyncPeriod = time.Second

// ErrNilHandler is returned when adding a nil handler.
var ErrNilHandler = errors.New("dbinformer: nil handler")

// ErrForeignRegistration is returned by RemoveEventHandler for a
// registration of another informer (or nil).
var ErrForeignRegistration = errors.New("dbinformer: registration does not belong to this informer")

// startListenerLocked needs i.mu held and the informer running.
func (i *SharedIndexInformer[T]) startListenerLocked(l *listener[T]) {
	l.mu.Lock()
	if l.removed || l.active {
		l.mu.Unlock()
		return
	}
	l.active, l.stopping = true, false
	l.mu.Unlock()
	ctx, wg := i.runCtx, i.runWG
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.run(ctx)
	}()
}

// shouldResync is the reflector's ShouldResync: it marks which handlers
// are due, so that the Sync deltas that follow reach only them.
func (i *SharedIndexInformer[T]) shouldResync() bool {
	i.handleMu.RLock()
	defer i.handleMu.RUnlock()
	now := i.clk.Now()
	need := false
	for _, l := range i.listeners {
		l.mu.Lock()
		l.syncing = l.resyncPeriod > 0 && !now.Before(l.nextResync)
		if l.syncing {
			need = true
			l.nextResync = now.Add(l.resyncPeriod)
		}
		l.mu.Unlock()
	}
	return need
}

// AddEventHandler registers h with the informer's default resync period.
func (i *SharedIndexInformer[T]) AddEventHandler(h ResourceEventHandler[T]) (*Registration[T], error) {
	return i.AddEventHandlerWithOptions(h, HandlerOptions{})
}

// AddEventHandlerWithOptions registers h. If the cache already holds
// objects, h first receives an OnAdd (isInInitialList true) for each.
func (i *SharedIndexInformer[T]) AddEventHandlerWithOptions(h ResourceEventHandler[T], o HandlerOptions) (*Registration[T], error) {
	if h == nil {
		return nil, ErrNilHandler
	}
	period := max(i.opts.ResyncPeriod, 0)
	switch {
	case o.ResyncPeriod < 0:
		period = 0
	case o.ResyncPeriod > 0:
		period = o.ResyncPeriod
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	requested := period
	if period > 0 {
		if period < MinimumResyncPeriod {
			period = MinimumResyncPeriod
		}
		// Unlike client-go, an informer created without a resync period
		// that has not started adopts the handler's: client-go silently
		// disables such a handler's resync, a classic surprise.
		if period < i.resyncCheckPeriod || (i.resyncCheckPeriod == 0 && !i.started) {
			if i.started {
				period = i.resyncCheckPeriod
			} else {
				i.resyncCheckPeriod = period
				for _, l := range i.listeners {
					l.mu.Lock()
					l.resyncPeriod = determineResyncPeriod(l.requestedResync, period)
					l.mu.Unlock()
				}
			}
		}
		requested = period
	}
	i.handlerSeq++
	name := o.Name
	if name == "" {
		name = handlerName(h)
	}
	if name == "" {
		// Numbered, so that two handlers of one type are told apart in
		// metrics.
		name = fmt.Sprintf("%T#%d", h, i.handlerSeq)
	}
	l := &listener[T]{
		inf:             i,
		name:            name,
		h:               h,
		max:             o.MaxPending,
		wake:            make(chan struct{}, 1),
		done:            make(chan struct{}),
		requestedResync: requested,
		resyncPeriod:    determineResyncPeriod(requested, i.resyncCheckPeriod),
	}
	l.cond = sync.NewCond(&l.mu)
	l.nextResync = i.clk.Now().Add(l.resyncPeriod)

	i.handleMu.Lock()
	// Replay the cache so the new handler starts from the same state as
	// the others; nothing is applied meanwhile (handleMu).
	i.indexer.snapshot(func(n int, all iter.Seq2[string, T]) {
		if n > 0 {
			l.buf = make([]notification[T], 0, n)
			for k, v := range all {
				l.buf = append(l.buf, notification[T]{kind: noteAdd, flag: true, key: k, obj: v})
			}
			l.initialPending, l.queued = n, n
		}
	})
	i.listeners = append(i.listeners, l)
	i.handleMu.Unlock()
	if i.running {
		i.startListenerLocked(l)
	}
	l.reportPending()
	return &Registration[T]{l: l}, nil
}

// determineResyncPeriod is client-go's: a handler cannot resync more often
// than the informer checks, and not at all if the informer never checks.
func determineResyncPeriod(desired, check time.Duration) time.Duration {
	if desired == 0 {
		return 0
	}
	if check == 0 {
		return 0
	}
	if desired < check {
		return check
	}
	return desired
}

// RemoveEventHandler stops delivering to the registration's handler.
// Undelivered notifications are dropped. It does not wait for a call in
// progress; Registration.Done does. Removing a registration twice is not an
// error.
func (i *SharedIndexInformer[T]) RemoveEventHandler(reg *Registration[T]) error {
	if reg == nil || reg.l.inf != i {
		return ErrForeignRegistration
	}
	l := reg.l
	l.mu.Lock()
	l.removed = true
	l.buf, l.head, l.queued = nil, 0, 0
	if l.initialCh != nil {
		close(l.initialCh)
		l.initialCh = nil
	}
	l.cond.Broadcast()
	if !l.active {
		l.closeDone()
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	i.handleMu.Lock()
	for k, x := range i.listeners {
		if x == l {
			i.listeners = append(i.listeners[:k], i.listeners[k+1:]...)
			break
		}
	}
	i.handleMu.Unlock()
	l.reportPending()
	return nil
}

// Registration is one handler's registration.
type Registration[T any] struct{ l *listener[T] }

// HasSynced reports whether the informer has synced and this handler has
// received every notification of the initial list (or of its replay).
func (r *Registration[T]) HasSynced() bool {
	if !r.l.inf.HasSynced() {
		return false
	}
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return r.l.initialPending == 0
}

// Pending counts the notifications not yet delivered to this handler.
func (r *Registration[T]) Pending() int {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return r.l.pendingLocked()
}

// Name is the handler's name in errors and metrics.
func (r *Registration[T]) Name() string { return r.l.name }

// Done is closed once the registration was removed and no call to its
// handler is in progress.
func (r *Registration[T]) Done() <-chan struct{} { return r.l.done }

// listener owns one handler's buffer and goroutine.
type listener[T any] struct {
	inf  *SharedIndexInformer[T]
	name string
	h    ResourceEventHandler[T]
	max  int
	wake chan struct{}

	mu   sync.Mutex
	cond *sync.Cond // signalled when the buffer has room or stop was asked
	buf  []notification[T]
	head int
	// queued counts the notifications in buf[head:], and delivering those
	// taken from buf and not yet handled; a replayed page counts as many
	// as its objects.
	queued, delivering int
	// initialPending counts undelivered adds with isInInitialList;
	// initialCh, when waited on, is closed as it reaches zero.
	initialPending int
	initialCh      chan struct{}
	active         bool
	removed        bool
	stopping       bool
	done           chan struct{}
	doneOnce       sync.Once

	requestedResync time.Duration
	resyncPeriod    time.Duration
	nextResync      time.Time
	syncing         bool
}

func (l *listener[T]) closeDone() { l.doneOnce.Do(func() { close(l.done) }) }

func (l *listener[T]) pendingLocked() int { return l.queued + l.delivering }

// reportPending reports under l.mu so that reports from the informer and
// from the delivery goroutine reach the metric in the order the counts were
// taken; reported after unlocking, an older count could land last and leave
// the gauge stale. InformerMetrics methods must not block, so this is safe.
func (l *listener[T]) reportPending() {
	l.mu.Lock()
	l.inf.met.PendingNotifications(l.name, l.pendingLocked())
	l.mu.Unlock()
}

// add appends notes under one lock, blocking while the buffer is full.
func (l *listener[T]) add(notes []notification[T]) {
	l.mu.Lock()
	if l.removed {
		l.mu.Unlock()
		return
	}
	added := 0
	for k := range notes {
		n := &notes[k]
		if n.sync && !l.syncing {
			continue
		}
		for l.max > 0 && l.pendingLocked() >= l.max && !l.removed && !l.stopping {
			l.signal()
			l.cond.Wait()
		}
		if l.removed {
			break
		}
		l.buf = append(l.buf, *n)
		w := n.weight()
		l.queued += w
		if n.initial() {
			l.initialPending += w
		}
		added++
	}
	if added > 0 {
		l.inf.met.PendingNotifications(l.name, l.pendingLocked()) // under l.mu: see reportPending
	}
	l.mu.Unlock()
	if added > 0 {
		l.signal()
	}
}

func (l *listener[T]) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *listener[T]) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.stopping = true
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer func() {
		stop()
		l.mu.Lock()
		// stopping stays set until the next start: the informer's
		// processing may still be adding to this buffer, and must not
		// wait for room that nobody will make. It is set here too because
		// stop() can win against a cancellation that has closed Done but
		// not yet run the AfterFunc.
		l.active = false
		if ctx.Err() != nil {
			l.stopping = true
			l.cond.Broadcast()
		}
		if l.removed {
			l.closeDone()
		}
		l.mu.Unlock()
	}()
	var batch []notification[T]
	for {
		l.mu.Lock()
		for l.head == len(l.buf) && !l.removed {
			l.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
			}
			l.mu.Lock()
		}
		if l.removed || ctx.Err() != nil {
			l.mu.Unlock()
			return
		}
		// Swap buffers: the handler drains one while add fills the other.
		batch, l.buf = l.buf[l.head:], batch[:0]
		l.head = 0
		l.delivering, l.queued = l.queued, 0
		l.cond.Broadcast()
		l.mu.Unlock()

		for k := range batch {
			n := &batch[k]
			if n.kind == noteReplay {
				if !l.replay(ctx, n.page) {
					return
				}
				continue
			}
			l.call(ctx, n)
			if l.delivered(n.initial()) {
				return
			}
		}
		clear(batch)
		l.reportPending()
	}
}

// delivered counts one notification handled (an initial add if initial);
// it reports whether the registration was removed meanwhile.
func (l *listener[T]) delivered(initial bool) (removed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delivering--
	if initial && l.initialPending > 0 {
		l.initialPending--
		if l.initialPending == 0 && l.initialCh != nil {
			close(l.initialCh)
			l.initialCh = nil
		}
	}
	if l.max > 0 {
		l.cond.Broadcast()
	}
	return l.removed
}

// replay delivers a lazily loaded page's objects as initial adds, decoded
// from the checkpoint's bytes: the values loaded, whatever the cache has
// done with them since (the changes since are in the buffer behind). The
// keys are copied off the checkpoint's block, which a handler keeping them
// would otherwise keep. It reports false if the registration was removed
// meanwhile.
func (l *listener[T]) replay(ctx context.Context, p *lazyObjects[T]) bool {
	objs := p.decodeLoaded()
	keys := p.keys()
	for i := range objs {
		l.call(ctx, &notification[T]{kind: noteAdd, flag: true, key: keys[i], obj: objs[i]})
		if l.delivered(true) {
			return false
		}
	}
	return true
}

// call delivers one notification; a panicking handler is reported and
// skipped, and the informer and the other handlers go on.
func (l *listener[T]) call(ctx context.Context, n *notification[T]) {
	defer func() {
		if p := recover(); p != nil {
			l.inf.met.HandlerPanicked(l.name)
			l.inf.rep.report(ctx, &HandlerPanicError{Informer: l.inf.name, Handler: l.name, Key: n.key, Value: fmt.Sprint(p), Stack: debug.Stack()})
		}
	}()
	switch n.kind {
	case noteAdd:
		l.h.OnAdd(n.key, n.obj, n.flag)
	case noteUpdate:
		l.h.OnUpdate(n.key, n.old, n.obj)
	case noteDelete:
		l.h.OnDelete(n.key, n.obj, n.flag)
	}
}

// HandlerPanicError reports a handler that panicked on a key.
type HandlerPanicError struct {
	Informer, Handler, Key string
	// Value is the panic value, formatted.
	Value string
	Stack []byte
}

func (e *HandlerPanicError) Error() string {
	return fmt.Sprintf("%s: handler %s panicked on key %q: %v", e.Informer, e.Handler, e.Key, e.Value)
}
