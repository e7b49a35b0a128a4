package core

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core/driver"
)

// ProgressInterval is how often the open watch is expected to show
// progress: InformerOptions.ProgressInterval when set, else the
// driver.ListerWatcher's (driver.ProgressIntervaler); 0 means no stuck-watch detection.
func (r *Reflector[T]) ProgressInterval() time.Duration {
	d := r.cfg.progressInterval
	if d == 0 {
		if pi, ok := driver.Capability[driver.ProgressIntervaler](r.lw); ok {
			d = pi.ProgressInterval()
		}
	}
	return max(d, 0)
}

// watchActivity is what the watchdog reads of a watch: when Emit last
// returned (UnixNano on the reflector's clock) and whether it is in Emit.
type watchActivity struct {
	last atomic.Int64
	busy atomic.Int32
}

// watchdog ends a watch that stays silent (no Emit) for driver.StuckIntervals
// progress intervals, asking a driver.ProgressReporter's watch for a bookmark
// after each silent interval first: a healthy idle watch answers, and
// its answer is an Emit.
//
// Silence is counted only while this process runs. When the watchdog's
// own timer fires more than half an interval late, the process stood still
// (SIGSTOP, a stop-the-world pause, a suspended VM) and the watch could not
// emit either: the count starts again from the moment it resumed, instead
// of blaming the source for the process's pause.
func (r *Reflector[T]) watchdog(done <-chan struct{}, cancel context.CancelCauseFunc, interval time.Duration, progress chan struct{}, act *watchActivity) {
	t := r.cfg.clk.NewTimer(interval)
	defer t.Stop()
	due := r.cfg.clk.Now().Add(interval)
	// asked is the last silent interval a request was made for; requests
	// counts them since the last Emit. resumed is when the process last
	// came back from a pause (UnixNano; 0: never).
	seen, asked, requests := act.last.Load(), 0, 0
	var resumed int64
	for {
		select {
		case <-done:
			return
		case <-t.C():
		}
		now := r.cfg.clk.Now()
		if now.Sub(due) > interval/2 {
			resumed = now.UnixNano()
		}
		last := act.last.Load()
		var silent time.Duration
		if act.busy.Load() == 0 {
			silent = now.Sub(time.Unix(0, max(last, resumed)))
		}
		if last != seen || silent <= 0 {
			seen, asked, requests = last, 0, 0
			silent = max(silent, 0)
		}
		k := int(silent / interval)
		if k >= driver.StuckIntervals {
			msg := fmt.Sprintf("no event or bookmark for %v, progress expected every %v", roundDuration(silent), interval)
			if requests > 0 {
				msg += fmt.Sprintf("; %d bookmark requests unanswered", requests)
			}
			cancel(fmt.Errorf("%w (%s)", driver.ErrWatchStuck, msg))
			return
		}
		if k >= 1 && progress != nil && asked < k {
			notify(progress)
			asked = k
			requests++
		}
		next := interval - silent%interval
		t.Reset(next)
		due = now.Add(next)
	}
}
