// Package clock lets the core's time-driven code (resync, backoff, delayed
// queue items, rate limiters, metrics) take its time from an injected Clock,
// so that tests move time forward by hand and never sleep.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	Since(t time.Time) time.Duration
	// After is NewTimer(d).C() for callers that never stop the timer.
	After(d time.Duration) <-chan time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer behind an interface.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker behind an interface.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the wall clock.
type Real struct{}

var _ Clock = Real{}

func (Real) Now() time.Time                         { return time.Now() }
func (Real) Since(t time.Time) time.Duration        { return time.Since(t) }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (Real) NewTimer(d time.Duration) Timer         { return realTimer{time.NewTimer(d)} }
func (Real) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// Or returns c, or the wall clock when c is nil, so that a zero-value
// config field means "real time".
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Fake is a Clock that only moves when told to. Timers and tickers fire
// when Step or SetTime moves the time past their deadline.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
}

var _ Clock = (*Fake)(nil)

type fakeWaiter struct {
	f        *Fake
	deadline time.Time
	period   time.Duration // > 0 for tickers
	ch       chan time.Time
	active   bool
}

// NewFake returns a fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{f: f, deadline: f.now.Add(d), ch: make(chan time.Time, 1), active: true}
	f.waiters = append(f.waiters, w)
	f.fireLocked()
	return w
}

func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{f: f, deadline: f.now.Add(d), period: d, ch: make(chan time.Time, 1), active: true}
	f.waiters = append(f.waiters, w)
	return fakeTicker{w}
}

type fakeTicker struct{ w *fakeWaiter }

func (t fakeTicker) C() <-chan time.Time { return t.w.ch }
func (t fakeTicker) Stop()               { t.w.Stop() }

// Step moves the clock forward by d and fires what became due.
func (f *Fake) Step(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fireLocked()
}

// SetTime moves the clock to t and fires what became due.
func (f *Fake) SetTime(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
	f.fireLocked()
}

// HasWaiters reports whether any timer or ticker is active, so a test can
// wait until the code under test has armed its timer before stepping.
func (f *Fake) HasWaiters() bool { return f.Waiters() > 0 }

// Waiters counts the active timers and tickers.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// fireLocked delivers every due waiter in deadline order. Like time.Timer,
// a channel holds at most one pending tick; a ticker that falls behind drops
// ticks.
func (f *Fake) fireLocked() {
	sort.SliceStable(f.waiters, func(i, j int) bool { return f.waiters[i].deadline.Before(f.waiters[j].deadline) })
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.deadline.After(f.now) {
			kept = append(kept, w)
			continue
		}
		select {
		case w.ch <- f.now:
		default:
		}
		if w.period > 0 {
			for !w.deadline.After(f.now) {
				w.deadline = w.deadline.Add(w.period)
			}
			kept = append(kept, w)
			continue
		}
		w.active = false
	}
	for i := len(kept); i < len(f.waiters); i++ {
		f.waiters[i] = nil
	}
	f.waiters = kept
}

func (w *fakeWaiter) C() <-chan time.Time { return w.ch }

func (w *fakeWaiter) Stop() bool {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	was := w.active
	w.f.removeLocked(w)
	return was
}

func (w *fakeWaiter) Reset(d time.Duration) bool {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	was := w.active
	w.f.removeLocked(w)
	w.deadline = w.f.now.Add(d)
	w.active = true
	w.f.waiters = append(w.f.waiters, w)
	w.f.fireLocked()
	return was
}

func (f *Fake) removeLocked(w *fakeWaiter) {
	w.active = false
	for i, x := range f.waiters {
		if x == w {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			return
		}
	}
}
