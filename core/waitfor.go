package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// WaitFor blocks until the cache has applied every change up to rv (and
// every bookmark), which gives read-your-writes: write, take the version
// the source returned, WaitFor it, read the cache. When the driver.ListerWatcher
// is a driver.ProgressReporter the open watch is asked for a bookmark (at most
// once per ProgressRequestInterval), so a version that touched no watched
// key is reached too. Without one, such a version is reached at the next
// change or bookmark the source sends. When ctx ends first, the error wraps
// ctx's error and says why the cache is behind: a list running, the latest
// list or watch failure (see SyncStatus). When the run ends on a
// permanent failure first, WaitFor returns it (matching driver.ErrPermanent): the
// frozen cache will never reach rv.
func (i *SharedIndexInformer[T]) WaitFor(ctx context.Context, rv ResourceVersion) error {
	for {
		// Take the signal before reading the version, so that a change in
		// between wakes the wait below.
		ch := i.queue.Changed()
		applied := i.queue.AppliedVersion()
		if applied >= rv {
			return nil
		}
		var tick <-chan time.Time
		stop := func() bool { return false }
		if i.opts.ProgressRequestInterval > 0 {
			i.requestProgress(ctx)
			t := i.clk.NewTimer(i.opts.ProgressRequestInterval)
			tick, stop = t.C(), t.Stop
		}
		i.mu.Lock()
		failure := i.failure
		i.mu.Unlock()
		select {
		case <-ch:
		case <-tick:
		case <-failure.done:
			stop()
			if i.queue.AppliedVersion() >= rv {
				return nil
			}
			return fmt.Errorf("%s: waiting for version %d (applied %d): the informer stopped: %w", i.name, rv, applied, failure.err)
		case <-ctx.Done():
			stop()
			msg := fmt.Sprintf("%s: waiting for version %d (applied %d)", i.name, rv, applied)
			st := i.SyncStatus()
			if why := st.why(); why != "" {
				msg += ": " + why
			}
			return st.waitError(msg, ctx.Err())
		}
		stop()
	}
}

func (i *SharedIndexInformer[T]) requestProgress(ctx context.Context) {
	i.progMu.Lock()
	now := i.clk.Now()
	if !i.lastReq.IsZero() && now.Sub(i.lastReq) < i.opts.ProgressRequestInterval {
		i.progMu.Unlock()
		return
	}
	i.lastReq = now
	i.progMu.Unlock()
	i.mu.Lock()
	r := i.reflector
	i.mu.Unlock()
	if r == nil {
		return
	}
	err := r.RequestProgress(ctx)
	switch {
	case errors.Is(err, ErrProgressNotSupported):
		// No watch open yet (or none that can): let the next wake-up try
		// again instead of waiting out the interval.
		i.progMu.Lock()
		i.lastReq = time.Time{}
		i.progMu.Unlock()
	case err != nil && ctx.Err() == nil:
		i.rep.report(ctx, fmt.Errorf("%s: request progress: %w", i.name, err))
	}
}
