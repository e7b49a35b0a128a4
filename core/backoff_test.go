package core

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
)

func TestBackoffJitterNeverPassesMax(t *testing.T) {
	fc := clock.NewFake(t0)
	for _, cfg := range []Backoff{{}, ClientGoBackoff, {Initial: time.Second, Max: 3 * time.Second, Jitter: 4}} {
		b := newBackoffState(cfg, fc)
		max := b.cfg.Max
		var top time.Duration
		for i := range 200 {
			switch i % 3 {
			case 0:
				b.rand = func() float64 { return 0.9999999 }
			case 1:
				b.rand = func() float64 { return 0 }
			default:
				b.rand = func() float64 { return 0.5 }
			}
			d := b.next()
			if d > max || d <= 0 {
				t.Fatalf("%+v: delay %v outside (0, %v]", cfg, d, max)
			}
			top = maxDur(top, d)
		}
		// At the cap the spread moves down, it is not cut to a constant.
		b.rand = func() float64 { return 0 }
		if d := b.next(); d >= max {
			t.Fatalf("%+v: lowest jitter at the cap = %v, want below %v", cfg, d, max)
		}
		if top < max*9/10 {
			t.Fatalf("%+v: the ladder never neared its cap: %v", cfg, top)
		}
	}
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

func TestBackoffProgressResetsTheLadder(t *testing.T) {
	fc := clock.NewFake(t0)
	b := newBackoffState(Backoff{Initial: time.Second, Max: 8 * time.Second, Jitter: -1, Reset: time.Hour}, fc)
	// A source that fails at once, again and again, climbs.
	var got []time.Duration
	for range 5 {
		got = append(got, b.next())
		fc.Step(time.Second)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("instant failures: delays %v, want %v", got, want)
		}
	}
	b.progress()
	if d := b.next(); d != time.Second {
		t.Fatalf("after progress delay = %v, want Initial", d)
	}
	if d := b.next(); d != 2*time.Second {
		t.Fatalf("without progress since, delay = %v, want 2s", d)
	}
	fc.Step(time.Hour)
	if d := b.next(); d != time.Second {
		t.Fatalf("after a healthy Reset period delay = %v, want Initial", d)
	}
}

// Through the reflector: a watch that moved the version and then broke is
// retried after Initial, while one that breaks before anything climbs.
func TestReflectorBackoffFollowsProgress(t *testing.T) {
	lw := newFakeLW()
	bo := Backoff{Initial: time.Second, Max: time.Minute, Jitter: -1, Reset: time.Hour}
	inf, fc, ec := newTestInformer(lw, InformerOptions[string]{Backoff: bo, MinWatchTimeout: -1})
	started(t, inf)
	lw.list(t, 5)
	reset := errors.New("connection reset")
	failures := 0
	fail := func(w *fakeWatcher) {
		t.Helper()
		w.fail(t, reset)
		failures++
		eventually(t, "failure reported", func() bool {
			n := 0
			ec.mu.Lock()
			for _, e := range ec.errs {
				if errors.Is(e, reset) {
					n++
				}
			}
			ec.mu.Unlock()
			return n == failures
		})
		eventually(t, "backoff timer", func() bool { return fc.Waiters() == 1 })
	}
	// Two instant failures: 1s, then 2s.
	fail(lw.watch(t))
	fc.Step(time.Second)
	fail(lw.watch(t))
	fc.Step(time.Second)
	if fc.Waiters() != 1 {
		t.Fatal("the second instant failure did not wait longer than the first")
	}
	fc.Step(time.Second)
	w := lw.watch(t)
	// Progress, then a failure: back to 1s.
	w.send(t, add("a", "a1", 6))
	must(t, inf.WaitFor(testCtx(t), 6))
	fail(w)
	fc.Step(time.Second)
	if w2 := lw.watch(t); w2.from != 6 {
		t.Fatalf("resumed from %d, want 6", w2.from)
	}
}

// healingLW is a fakeLW whose source says when it is back.
type healingLW struct {
	*fakeLW
	healed chan struct{}
}

func (h healingLW) WaitHealed(ctx context.Context) error {
	select {
	case <-h.healed:
		return nil
	case <-ctx.Done():
		return driver.Stopped(ctx)
	}
}

func TestHealCutsABackoffShort(t *testing.T) {
	lw := healingLW{newFakeLW(), make(chan struct{})}
	inf := NewSharedIndexInformer[string](lw, InformerOptions[string]{
		Clock:        clock.NewFake(t0), // never stepped: only the heal can end the sleep
		Backoff:      Backoff{Initial: time.Hour, Max: time.Hour},
		ErrorHandler: func(error) {},
	})
	started(t, inf)
	lw.listErr(t, 0, errors.New("no leader"))
	close(lw.healed)
	lw.list(t, 5)
	must(t, inf.WaitForCacheSync(testCtx(t)))
}

// notDownLW answers every heal wait with "it never was down".
type notDownLW struct{ *fakeLW }

func (notDownLW) WaitHealed(context.Context) error { return errors.New("not down") }

func TestAHealWaitThatFailsKeepsTheBackoff(t *testing.T) {
	lw := notDownLW{newFakeLW()}
	fc := clock.NewFake(t0)
	inf := NewSharedIndexInformer[string](lw, InformerOptions[string]{
		Clock:        fc,
		Backoff:      Backoff{Initial: time.Hour, Max: time.Hour, Jitter: -1},
		ErrorHandler: func(error) {},
	})
	started(t, inf)
	lw.listErr(t, 0, errors.New("permission denied"))
	eventually(t, "backoff timer", func() bool { return fc.Waiters() == 1 })
	if n := lw.listCalls.Load(); n != 1 {
		t.Fatalf("%d lists before the backoff ended, want 1", n)
	}
	fc.Step(time.Hour)
	lw.list(t, 5)
	must(t, inf.WaitForCacheSync(testCtx(t)))
}

func TestAResumedWatchThatExpiresRelistsAtOnce(t *testing.T) {
	lw := newFakeLW()
	bo := Backoff{Initial: time.Hour, Max: time.Hour, Jitter: -1, Reset: 100 * time.Hour}
	inf, fc, _ := newTestInformer(lw, InformerOptions[string]{Backoff: bo, MinWatchTimeout: -1})
	started(t, inf)
	lw.list(t, 5)
	// An outage: the watch fails and the reflector sleeps an hour.
	lw.watch(t).fail(t, errors.New("connection refused"))
	eventually(t, "backoff timer", func() bool { return fc.Waiters() == 1 })
	fc.Step(time.Hour)
	// The source is back with its history restarted: the resumed watch
	// expires, and the relist comes without another hour's sleep.
	if w := lw.watch(t); w.from != 5 {
		t.Fatalf("resumed from %d, want 5", w.from)
	} else {
		w.fail(t, fmt.Errorf("too old: %w", driver.ErrExpired))
	}
	lw.list(t, 9)
	// The first watch after that list expiring at once still backs off.
	lw.watch(t).fail(t, fmt.Errorf("too old: %w", driver.ErrExpired))
	eventually(t, "backoff timer after a fresh watch expired", func() bool { return fc.Waiters() == 1 })
	if n := lw.listCalls.Load(); n != 2 {
		t.Fatalf("%d lists, want 2 before the backoff ends", n)
	}
}
