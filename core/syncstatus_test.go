package core

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func wantMessage(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Fatalf("%s:\n got %v\nwant %s", what, err, want)
	}
}

// A list that keeps failing: each failure reaches the error handler as it
// happens, the sync status keeps count, and the waits name the source's
// error, how many attempts failed and when the last did.
func TestWaitForCacheSyncNamesTheLatestListError(t *testing.T) {
	lw := newFakeLW()
	inf, fc, ec := newTestInformer(lw, InformerOptions[string]{
		Backoff: Backoff{Initial: time.Second, Max: time.Minute, Jitter: -1, Reset: time.Hour},
	})
	started(t, inf)
	noLeader := errors.New("etcdserver: no leader")
	reported := func(n int) func() bool {
		return func() bool {
			ec.mu.Lock()
			defer ec.mu.Unlock()
			return len(ec.errs) == n
		}
	}
	// Failures at t0, t0+1s and t0+3s (backoff 1s, 2s).
	lw.listErr(t, 0, noLeader)
	eventually(t, "first failure reported", reported(1))
	stepArmed(t, fc, 1, time.Second)
	lw.listErr(t, 0, noLeader)
	eventually(t, "second failure reported", reported(2))
	stepArmed(t, fc, 1, 2*time.Second)
	lw.listErr(t, 0, noLeader)
	eventually(t, "third failure reported", reported(3))
	// In the 4s backoff, 2s after the last failure.
	stepArmed(t, fc, 1, 2*time.Second)
	ec.mu.Lock()
	errs := append([]error(nil), ec.errs...)
	ec.mu.Unlock()
	for _, e := range errs {
		if !errors.Is(e, noLeader) || !strings.Contains(e.Error(), "test source: list: etcdserver: no leader") {
			t.Fatalf("reported %v, want the source's list error", e)
		}
	}

	st := inf.SyncStatus()
	if st.Synced || !st.ListStarted.IsZero() || st.ListFailures.Count != 3 || !st.ListFailures.At.Equal(t0.Add(3*time.Second)) || !errors.Is(st.ListFailures.Last, noLeader) {
		t.Fatalf("sync status %+v", st)
	}
	if got, want := st.String(), "not synced: list: etcdserver: no leader (3 attempts, last 2s ago)"; got != want {
		t.Fatalf("SyncStatus.String() = %q, want %q", got, want)
	}

	err := inf.WaitForCacheSync(canceledCtx())
	wantMessage(t, "WaitForCacheSync", err,
		"test source: cache not synced 5s after start: list: etcdserver: no leader (3 attempts, last 2s ago): context canceled")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, noLeader) {
		t.Fatalf("WaitForCacheSync = %v, want it to match context.Canceled and the list error", err)
	}

	err = WaitForCacheSyncTimeout(context.Background(), 1, inf) // expires at once: how soon does not matter
	if !errors.Is(err, ErrSyncTimeout) || !errors.Is(err, noLeader) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForCacheSyncTimeout = %v, want ErrSyncTimeout, the list error and the deadline", err)
	}
	wantMessage(t, "WaitForCacheSyncTimeout", err,
		"dbinformer: initial sync timed out after 1ns: test source: cache not synced 5s after start: list: etcdserver: no leader (3 attempts, last 2s ago): context deadline exceeded")

	// The fourth attempt starts at t0+7s and hangs: the wait says the list
	// is running, for how long, and what the previous attempt said.
	fc.Step(2 * time.Second)
	eventually(t, "fourth list", func() bool { return lw.listCalls.Load() == 4 })
	fc.Step(12 * time.Second)
	err = inf.WaitForCacheSync(canceledCtx())
	wantMessage(t, "WaitForCacheSync while listing", err,
		"test source: cache not synced 19s after start: the list has been running for 12s (attempt 4; the last failed 16s ago: etcdserver: no leader): context canceled")
	if !errors.Is(err, noLeader) {
		t.Fatalf("%v does not match the previous list error", err)
	}

	// A list that succeeds clears it all.
	lw.list(t, 5)
	must(t, inf.WaitForCacheSync(testCtx(t)))
	st = inf.SyncStatus()
	if st.ListFailures.Count != 0 || st.ListFailures.Last != nil || inf.LastListError() != nil || !st.ListStarted.IsZero() {
		t.Fatalf("after a successful list: %+v", st)
	}
}

// The first list, still running when the wait gives up: how long.
func TestWaitForCacheSyncNamesARunningList(t *testing.T) {
	lw := newFakeLW()
	inf, fc, _ := newTestInformer(lw, InformerOptions[string]{})
	started(t, inf)
	eventually(t, "list called", func() bool { return lw.listCalls.Load() == 1 })
	fc.Step(50 * time.Second)
	err := inf.WaitForCacheSync(canceledCtx())
	wantMessage(t, "WaitForCacheSync", err,
		"test source: cache not synced 50s after start: the list has been running for 50s: context canceled")
	if got, want := inf.SyncStatus().String(), "not synced: the list has been running for 50s"; got != want {
		t.Fatalf("SyncStatus.String() = %q, want %q", got, want)
	}
}

func TestSyncStatusBeforeAndAfterARun(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{})
	if got := inf.SyncStatus().String(); got != "not started" {
		t.Fatalf("unstarted: %q", got)
	}
	wantMessage(t, "unstarted", inf.WaitForCacheSync(canceledCtx()),
		"test source: cache not synced, the informer was never started: context canceled")
	stop := started(t, inf)
	lw.list(t, 5)
	must(t, inf.WaitForCacheSync(testCtx(t)))
	lw.watch(t)
	if st := inf.SyncStatus(); st.String() != "synced" || !st.Running || st.AppliedVersion != 5 || st.LastSyncResourceVersion != 5 {
		t.Fatalf("synced: %q %+v", st.String(), st)
	}
	stop()
	if st := inf.SyncStatus(); st.Running || !st.Started || st.String() != "synced, not running (the cache is frozen at version 5)" {
		t.Fatalf("stopped: %q %+v", st.String(), st)
	}
}

// A watch that keeps failing: WaitFor names the latest watch error, the
// sync status counts the failures, and a watch that delivers clears them.
func TestWaitForNamesTheLatestWatchError(t *testing.T) {
	lw := newFakeLW()
	inf, fc, ec := newTestInformer(lw, InformerOptions[string]{
		Backoff:                 Backoff{Initial: time.Second, Max: time.Minute, Jitter: -1, Reset: time.Hour},
		MinWatchTimeout:         -1,
		ProgressRequestInterval: -1,
	})
	started(t, inf)
	lw.list(t, 5)
	refused := errors.New("dial tcp 10.0.0.1:2379: connect: connection refused")
	lw.watch(t).fail(t, refused)
	stepArmed(t, fc, 1, time.Second)
	lw.watch(t).fail(t, refused)
	stepArmed(t, fc, 1, time.Second) // 1s into the 2s backoff
	if ec.find(func(e error) bool { return errors.Is(e, refused) }) == nil {
		t.Fatal("watch error not reported")
	}

	err := inf.WaitFor(canceledCtx(), 9)
	wantMessage(t, "WaitFor", err,
		"test source: waiting for version 9 (applied 5): watch from version 5: dial tcp 10.0.0.1:2379: connect: connection refused (2 attempts, last 1s ago): context canceled")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, refused) {
		t.Fatalf("WaitFor = %v, want it to match context.Canceled and the watch error", err)
	}
	if got, want := inf.SyncStatus().String(), "synced; watch from version 5: dial tcp 10.0.0.1:2379: connect: connection refused (2 attempts, last 1s ago)"; got != want {
		t.Fatalf("SyncStatus.String() = %q, want %q", got, want)
	}

	fc.Step(time.Second)
	w := lw.watch(t)
	w.send(t, add("a", "a1", 9))
	must(t, inf.WaitFor(testCtx(t), 9))
	if st := inf.SyncStatus(); st.WatchFailures.Count != 0 || st.String() != "synced" {
		t.Fatalf("after the watch delivered: %q %+v", st.String(), st.WatchFailures)
	}
	// A wait that merely times out with everything healthy says only that.
	wantMessage(t, "WaitFor", inf.WaitFor(canceledCtx(), 10),
		"test source: waiting for version 10 (applied 9): context canceled")
}

func TestRoundDuration(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{-time.Second, 0},
		{1500 * time.Microsecond, 2 * time.Millisecond},
		{1234 * time.Millisecond, 1200 * time.Millisecond},
		{29*time.Second + 600*time.Millisecond, 30 * time.Second},
	} {
		if got := roundDuration(c.in); got != c.want {
			t.Errorf("roundDuration(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
