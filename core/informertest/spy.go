package informertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// Op names a ListerWatcher call.
type Op string

// The calls a Spy sees.
const (
	OpList  Op = "list"
	OpWatch Op = "watch"
)

// Call is one List or Watch that went through a Spy.
type Call struct {
	Op   Op
	From core.ResourceVersion // Watch: the version it started from
	RV   core.ResourceVersion // List: the version it returned
	Err  error                // what it returned; nil while it runs
	Done bool                 // it has returned
	Open bool                 // Watch: running in the wrapped ListerWatcher (past any Gate and planned failure)
}

func (c Call) String() string {
	var s string
	if c.Op == OpWatch {
		s = fmt.Sprintf("watch from %d", c.From)
	} else {
		s = "list"
		if c.Done && c.Err == nil {
			s += fmt.Sprintf(" at %d", c.RV)
		}
	}
	switch {
	case !c.Done:
		s += " (running)"
	case c.Err != nil:
		s += ": " + c.Err.Error()
	}
	return s
}

// Spy wraps any driver.ListerWatcher (core/memory or a real adapter) and lets
// a test see and steer the calls the informer makes: it counts and records
// Lists and Watches, holds them at a Gate, fails the next one, and breaks
// the open watches as a dropped connection would. Its Unwrap keeps every
// optional capability of what it wraps visible to driver.Capability. All
// methods are safe for concurrent use.
type Spy[T any] struct {
	lw driver.ListerWatcher[T]

	mu        sync.Mutex
	calls     []Call
	open      map[*spyWatch]struct{}
	failList  []error
	failWatch []error
	listGate  *Gate
	watchGate *Gate
	changed   notifier
}

type spyWatch struct {
	cancel context.CancelCauseFunc
	broken error // set by Break
}

var _ driver.ListerWatcher[int] = (*Spy[int])(nil)

// Wrap returns a Spy around lw.
func Wrap[T any](lw driver.ListerWatcher[T]) *Spy[T] {
	return &Spy[T]{lw: lw, open: map[*spyWatch]struct{}{}}
}

// Unwrap returns the wrapped ListerWatcher: through it driver.Capability
// finds every optional capability of what the Spy wraps (and only those),
// so an informer over a Spy runs as it would over the bare ListerWatcher.
func (s *Spy[T]) Unwrap() driver.ListerWatcher[T] { return s.lw }

// begin records a call and returns its index.
func (s *Spy[T]) begin(c Call) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	s.changed.notify()
	return len(s.calls) - 1
}

func (s *Spy[T]) end(i int, rv core.ResourceVersion, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[i].RV, s.calls[i].Err, s.calls[i].Done = rv, err, true
	s.changed.notify()
}

// next pops the next planned failure and the gate for op.
func (s *Spy[T]) next(op Op) (error, *Gate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fail, gate := &s.failList, s.listGate
	if op == OpWatch {
		fail, gate = &s.failWatch, s.watchGate
	}
	var err error
	if len(*fail) > 0 {
		err = (*fail)[0]
		*fail = (*fail)[1:]
	}
	return err, gate
}

// List records the call, waits at the list Gate if one is set, returns the
// next planned failure if any, and otherwise calls the wrapped List.
func (s *Spy[T]) List(ctx context.Context, sink driver.ListSink[T]) (rv core.ResourceVersion, err error) {
	i := s.begin(Call{Op: OpList})
	defer func() { s.end(i, rv, err) }()
	fail, gate := s.next(OpList)
	if gate != nil {
		if err := gate.pass(ctx); err != nil {
			return 0, err
		}
	}
	if fail != nil {
		return 0, fail
	}
	return s.lw.List(ctx, sink)
}

// Watch records the call, waits at the watch Gate if one is set, returns
// the next planned failure if any, and otherwise runs the wrapped Watch,
// which Break can end.
func (s *Spy[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) (err error) {
	i := s.begin(Call{Op: OpWatch, From: from})
	defer func() { s.end(i, 0, err) }()
	fail, gate := s.next(OpWatch)
	if gate != nil {
		if err := gate.pass(ctx); err != nil {
			return driver.Stopped(ctx)
		}
	}
	if fail != nil {
		return fail
	}
	inner, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &spyWatch{cancel: cancel}
	s.mu.Lock()
	s.open[w] = struct{}{}
	s.calls[i].Open = true
	s.changed.notify()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.open, w)
		s.calls[i].Open = false
		s.changed.notify()
		s.mu.Unlock()
	}()
	err = s.lw.Watch(inner, from, opts)
	s.mu.Lock()
	broken := w.broken
	s.mu.Unlock()
	if broken != nil && ctx.Err() == nil {
		return broken
	}
	return err
}

// FailNextList makes the next List return err without reaching the wrapped
// ListerWatcher. Several calls queue failures for as many Lists.
func (s *Spy[T]) FailNextList(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failList = append(s.failList, err)
}

// FailNextWatch makes the next Watch return err at once. Several calls
// queue failures for as many Watches.
func (s *Spy[T]) FailNextWatch(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failWatch = append(s.failWatch, err)
}

// Break ends every open watch as a dropped connection would: the wrapped
// Watch's context is cancelled and, once it returned, the Spy's Watch
// returns err (unless the caller's own context ended meanwhile). It returns
// how many watches it broke. Changes the wrapped Watch emitted before are
// delivered; watches opened later are not affected.
func (s *Spy[T]) Break(err error) int {
	if err == nil {
		err = errors.New("informertest: watch broken")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.open {
		if w.broken == nil {
			w.broken = err
		}
		w.cancel(err)
	}
	return len(s.open)
}

// HoldLists makes every List from now on wait at the returned Gate, before
// it reaches the wrapped ListerWatcher, until the Gate is released or the
// List's context ends. Calling it again while the Gate is not released
// returns the same Gate.
func (s *Spy[T]) HoldLists() *Gate { return s.hold(&s.listGate) }

// HoldWatches is HoldLists for Watch. Open watches are not affected: Break
// them to make the informer open a new one, which then waits.
func (s *Spy[T]) HoldWatches() *Gate { return s.hold(&s.watchGate) }

func (s *Spy[T]) hold(slot **Gate) *Gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *slot == nil {
		g := &Gate{open: make(chan struct{})}
		g.release = func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if *slot == g {
				*slot = nil
			}
		}
		*slot = g
	}
	return *slot
}

// Calls returns every call so far, in the order they started.
func (s *Spy[T]) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Lists returns how many Lists started, failed ones included.
func (s *Spy[T]) Lists() int { return s.count(OpList) }

// Watches returns how many Watches started, failed ones included.
func (s *Spy[T]) Watches() int { return s.count(OpWatch) }

func (s *Spy[T]) count(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c.Op == op {
			n++
		}
	}
	return n
}

// Open returns how many watches are running in the wrapped ListerWatcher.
func (s *Spy[T]) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// LastList returns the last List that returned, and false if none did.
func (s *Spy[T]) LastList() (Call, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range slices.Backward(s.calls) {
		if c.Op == OpList && c.Done {
			return c, true
		}
	}
	return Call{}, false
}

// Wait waits until cond, given every call so far and the number of open
// watches, returns true, or ctx ends (its error is returned, with the
// calls). It wakes on every call that starts or ends.
func (s *Spy[T]) Wait(ctx context.Context, cond func(calls []Call, open int) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !cond(s.calls, len(s.open)) {
		ch := s.changed.wait()
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		s.mu.Lock()
		if err := ctx.Err(); err != nil && !cond(s.calls, len(s.open)) {
			return fmt.Errorf("informertest: spy: %w; %d open watches; calls: %v", err, len(s.open), s.calls)
		}
	}
	return nil
}

// WaitOpen waits until at least n watches are open (so that a test writes
// only once the code under test watches), or ctx ends.
func (s *Spy[T]) WaitOpen(ctx context.Context, n int) error {
	return s.Wait(ctx, func(_ []Call, open int) bool { return open >= n })
}

// WaitWatch waits until the n-th Watch call (counting from 1, as Watches
// does) is running in the wrapped ListerWatcher, or has returned, or ctx
// ends. After a Break, WaitWatch(ctx, n+1), with n read from Watches
// before the Break, waits until the informer watches again.
func (s *Spy[T]) WaitWatch(ctx context.Context, n int) error {
	return s.Wait(ctx, func(calls []Call, _ int) bool {
		seen := 0
		for _, c := range calls {
			if c.Op == OpWatch {
				seen++
				if seen == n {
					return c.Open || c.Done
				}
			}
		}
		return false
	})
}

// Gate holds the calls of a Spy (HoldLists, HoldWatches) until Release.
type Gate struct {
	open    chan struct{} // closed by Release
	once    sync.Once
	release func()

	mu      sync.Mutex
	held    int
	arrived notifier
}

// pass blocks until the gate is released or ctx ends.
func (g *Gate) pass(ctx context.Context) error {
	g.mu.Lock()
	g.held++
	g.arrived.notify()
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
	}()
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Held returns how many calls are waiting at the gate.
func (g *Gate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// Wait waits until at least one call waits at the gate, or ctx ends.
func (g *Gate) Wait(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.held == 0 {
		ch := g.arrived.wait()
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		g.mu.Lock()
		if err := ctx.Err(); err != nil && g.held == 0 {
			return fmt.Errorf("informertest: no call reached the gate: %w", err)
		}
	}
	return nil
}

// Release lets every held call through, and every later one: the Spy
// stops holding. Release may be called more than once.
func (g *Gate) Release() {
	g.once.Do(func() {
		g.release()
		close(g.open)
	})
}
