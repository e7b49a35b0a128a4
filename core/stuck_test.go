package core

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
)

// restartRecorder is InformerMetrics that keeps the reasons of watch
// restarts.
type restartRecorder struct {
	NoopMetrics
	mu      sync.Mutex
	reasons []error
}

func (m *restartRecorder) InformerMetrics(string) InformerMetrics { return m }

func (m *restartRecorder) WatchRestarted(reason error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reasons = append(m.reasons, reason)
}

func (m *restartRecorder) count(match func(error) bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.reasons {
		if match(r) {
			n++
		}
	}
	return n
}

func (m *restartRecorder) total() int { return m.count(func(error) bool { return true }) }

func isStuck(err error) bool { return errors.Is(err, driver.ErrWatchStuck) }

// pacedLW is a fakeLW that declares a progress interval. Its watch
// reports progress on request (the test answers, or does not).
type pacedLW struct {
	*fakeLW
	every time.Duration
}

func (p pacedLW) ProgressInterval() time.Duration { return p.every }

// quietPacedLW declares a progress interval but cannot answer bookmark
// requests: only bookmarks it sends on its own show that it lives.
type quietPacedLW struct {
	quietLW
	every time.Duration
}

func (p quietPacedLW) ProgressInterval() time.Duration { return p.every }

// syncBuffer is an io.Writer for a logger written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// stepArmed moves the fake clock by d once the code under test has armed want
// timers, so that each step lands on the timers it is meant for.
func stepArmed(t *testing.T, fc *clock.Fake, want int, d time.Duration) {
	t.Helper()
	eventually(t, "timers armed", func() bool { return fc.Waiters() == want })
	fc.Step(d)
}

// A watch that says nothing, and answers no bookmark request, for
// StuckIntervals of its progress intervals is ended, reported (log line
// at Warn, metric) and reopened from its last version without a relist.
func TestSilentWatchIsReopenedFromTheLastVersion(t *testing.T) {
	lw := pacedLW{newFakeLW(), 10 * time.Second}
	fc := clock.NewFake(t0)
	logs := &syncBuffer{}
	met := &restartRecorder{}
	inf := NewSharedIndexInformer[string](lw, InformerOptions[string]{
		Name:            "frozen source",
		Clock:           fc,
		Logger:          slog.New(slog.NewTextHandler(logs, nil)),
		Metrics:         met,
		MinWatchTimeout: -1,
		Backoff:         Backoff{Initial: time.Second, Jitter: -1},
		// WaitFor's own bookmark requests would blur the count below.
		ProgressRequestInterval: -1,
	})
	started(t, inf)
	lw.list(t, 5)
	w := lw.watch(t)
	w.send(t, add("a", "a1", 6))
	must(t, inf.WaitFor(testCtx(t), 6))

	// Two silent intervals: a bookmark request after each, no restart.
	stepArmed(t, fc, 1, 10*time.Second)
	eventually(t, "first bookmark request", func() bool { return w.progress.Load() == 1 })
	stepArmed(t, fc, 1, 10*time.Second)
	eventually(t, "second bookmark request", func() bool { return w.progress.Load() == 2 })
	if met.total() != 0 {
		t.Fatalf("restarted after two silent intervals: %v", met.reasons)
	}
	// The third: stuck.
	stepArmed(t, fc, 1, 10*time.Second)
	<-w.stop
	eventually(t, "restart counted", func() bool { return met.count(isStuck) == 1 })
	eventually(t, "log line", func() bool { return strings.Contains(logs.String(), "watch stuck") })
	line := logs.String()
	for _, want := range []string{"level=WARN", "frozen source", "watch from version 6", "no event or bookmark for 30s", "progress expected every 10s", "2 bookmark requests unanswered"} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q does not say %q", line, want)
		}
	}
	if st := inf.SyncStatus(); st.WatchFailures.Count != 1 || !errors.Is(st.WatchFailures.Last, driver.ErrWatchStuck) {
		t.Fatalf("sync status after a stuck watch: %+v", st.WatchFailures)
	}

	// Reopened after the backoff, from the last version, without a list.
	stepArmed(t, fc, 1, time.Second)
	w2 := lw.watch(t)
	if w2.from != 6 {
		t.Fatalf("reopened from %d, want 6", w2.from)
	}
	if n := lw.listCalls.Load(); n != 1 {
		t.Fatalf("a stuck watch relisted (%d lists)", n)
	}
	w2.send(t, add("b", "b1", 7))
	must(t, inf.WaitFor(testCtx(t), 7))
	if st := inf.SyncStatus(); st.WatchFailures.Count != 0 {
		t.Fatalf("a working watch still shows failures: %+v", st.WatchFailures)
	}
	if n := met.total(); n != 1 {
		t.Fatalf("%d watch restarts, want 1", n)
	}
}

// A source that cannot answer requests but sends its own bookmarks at
// least once per declared interval is never restarted either.
func TestSourceWithItsOwnHeartbeatIsNeverRestarted(t *testing.T) {
	f := newFakeLW()
	lw := quietPacedLW{quietLW{f}, 10 * time.Second}
	fc := clock.NewFake(t0)
	met := &restartRecorder{}
	inf := NewSharedIndexInformer[string](lw, InformerOptions[string]{
		Clock: fc, ErrorHandler: func(error) {}, Metrics: met, MinWatchTimeout: -1,
		ProgressRequestInterval: -1,
	})
	started(t, inf)
	f.list(t, 5)
	w := f.watch(t)
	for i := range 10 {
		stepArmed(t, fc, 1, 10*time.Second)
		// Its heartbeat: a bookmark at the same version.
		w.send(t, driver.Event[string]{Type: driver.Bookmark, RV: 5 + ResourceVersion(i%2)})
	}
	if n := met.total(); n != 0 {
		t.Fatalf("a watch with a heartbeat was restarted %d times", n)
	}
	if w.progress.Load() != 0 {
		t.Fatal("a watch that cannot answer was sent bookmark requests")
	}
}

// Time spent in Emit (a busy consumer, here a slow transform) is not
// silence: the source is not blamed for it.
func TestBusyConsumerIsNotAStuckWatch(t *testing.T) {
	lw := pacedLW{newFakeLW(), 10 * time.Second}
	fc := clock.NewFake(t0)
	met := &restartRecorder{}
	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	// unblock is registered as a cleanup after started's, so it runs
	// before it: a failing test must not leave Run stuck in the transform.
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	inf := NewSharedIndexInformer[string](lw, InformerOptions[string]{
		Clock: fc, ErrorHandler: func(error) {}, Metrics: met, MinWatchTimeout: -1,
		ProgressRequestInterval: -1,
		Transform: func(s string) (string, error) {
			if s == "slow" {
				close(entered)
				<-release
			}
			return s, nil
		},
	})
	started(t, inf)
	t.Cleanup(unblock)
	lw.list(t, 5)
	w := lw.watch(t)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		select {
		case w.ch <- step{evs: []driver.Event[string]{add("a", "slow", 6)}}:
		case <-w.stop:
		}
	}()
	<-entered
	for range 2 * driver.StuckIntervals {
		stepArmed(t, fc, 1, 10*time.Second)
	}
	eventually(t, "watchdog re-armed", func() bool { return fc.Waiters() == 1 })
	unblock()
	<-sent
	must(t, inf.WaitFor(testCtx(t), 6))
	if n := met.total(); n != 0 {
		t.Fatalf("a busy consumer got the watch restarted: %v", met.reasons)
	}
}

// A negative InformerOptions.ProgressInterval turns off the detection the
// source asks for; zero keeps the source's.
func TestProgressIntervalOption(t *testing.T) {
	paced := pacedLW{newFakeLW(), 10 * time.Second}
	q := NewFIFO[string](NewIndexer[string](nil))
	for _, c := range []struct {
		lw   driver.ListerWatcher[string]
		opt  time.Duration
		want time.Duration
	}{
		{paced, 0, 10 * time.Second},
		{paced, -1, 0},
		{paced, time.Second, time.Second},
		{quietLW{newFakeLW()}, 0, 0},
		{quietLW{newFakeLW()}, time.Minute, time.Minute},
		{quietPacedLW{quietLW{newFakeLW()}, -5}, 0, 0},
	} {
		r := NewReflector[string](c.lw, q, InformerOptions[string]{ProgressInterval: c.opt})
		if got := r.ProgressInterval(); got != c.want {
			t.Errorf("%T with option %v: interval %v, want %v", c.lw, c.opt, got, c.want)
		}
	}

	// Off: no watchdog timer while the watch is open.
	fc := clock.NewFake(t0)
	inf := NewSharedIndexInformer[string](paced, InformerOptions[string]{
		Clock: fc, ErrorHandler: func(error) {}, MinWatchTimeout: -1, ProgressInterval: -1,
		ProgressRequestInterval: -1,
	})
	started(t, inf)
	paced.list(t, 5)
	w := paced.watch(t)
	w.send(t, add("a", "a1", 6))
	must(t, inf.WaitFor(testCtx(t), 6))
	if n := fc.Waiters(); n != 0 {
		t.Fatalf("%d timers with stuck-watch detection off", n)
	}
}

// A pause of this process (SIGSTOP, a stop-the-world pause), seen as the
// watchdog's timer firing long after its time, is not the watch's silence:
// the count starts again when the process resumes, and only silence after
// that ends the watch.
func TestProcessPauseIsNotAStuckWatch(t *testing.T) {
	lw := pacedLW{newFakeLW(), 10 * time.Second}
	fc := clock.NewFake(t0)
	met := &restartRecorder{}
	inf := NewSharedIndexInformer[string](lw, InformerOptions[string]{
		Clock: fc, ErrorHandler: func(error) {}, Metrics: met, MinWatchTimeout: -1,
		ProgressRequestInterval: -1,
	})
	started(t, inf)
	lw.list(t, 5)
	w := lw.watch(t)
	w.send(t, add("a", "a1", 6))
	must(t, inf.WaitFor(testCtx(t), 6))

	// The process stands still for ten intervals: the timer fires once,
	// nine intervals late.
	stepArmed(t, fc, 1, 100*time.Second)
	stepArmed(t, fc, 1, 10*time.Second)
	eventually(t, "a bookmark request one interval after the resume", func() bool { return w.progress.Load() == 1 })
	if n := met.total(); n != 0 {
		t.Fatalf("a process pause ended the watch: %v", met.reasons)
	}
	// Silence after the resume still counts.
	stepArmed(t, fc, 1, 10*time.Second)
	stepArmed(t, fc, 1, 10*time.Second)
	<-w.stop
	eventually(t, "the stuck restart", func() bool { return met.count(isStuck) == 1 })
}
