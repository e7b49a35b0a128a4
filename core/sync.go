package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dbinformer/dbinformer/core/driver"
)

// CacheSyncWaiter is anything that can wait for its cache to sync:
// informers, handler registrations and factories.
type CacheSyncWaiter interface {
	WaitForCacheSync(ctx context.Context) error
}

var (
	_ CacheSyncWaiter = (*Factory)(nil)
	_ CacheSyncWaiter = (*SharedIndexInformer[int])(nil)
	_ CacheSyncWaiter = (*Registration[int])(nil)
)

// WaitForCacheSync waits for every waiter and joins their errors.
func WaitForCacheSync(ctx context.Context, waiters ...CacheSyncWaiter) error {
	var errs []error
	for _, w := range waiters {
		if err := w.WaitForCacheSync(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ErrSyncTimeout is matched by the error of WaitForCacheSyncTimeout when
// its timeout expired.
var ErrSyncTimeout = errors.New("dbinformer: initial sync timed out")

// WaitForCacheSyncTimeout is WaitForCacheSync with a time limit of its own
// (none when timeout is 0 or negative), which is how most programs wait at
// startup. Its error matches ErrSyncTimeout (and says why each cache is not
// synced) when the limit expired; it matches ctx's error when ctx ended
// first, which a program shutting down (Ctrl-C) can treat as a clean exit:
//
//	if err := core.WaitForCacheSyncTimeout(ctx, time.Minute, users); err != nil {
//		if ctx.Err() != nil {
//			return nil // interrupted
//		}
//		return err
//	}
func WaitForCacheSyncTimeout(ctx context.Context, timeout time.Duration, waiters ...CacheSyncWaiter) error {
	if timeout <= 0 {
		return WaitForCacheSync(ctx, waiters...)
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := WaitForCacheSync(sctx, waiters...)
	if err == nil || ctx.Err() != nil || sctx.Err() == nil {
		return err
	}
	return fmt.Errorf("%w after %v: %w", ErrSyncTimeout, timeout, err)
}

// WaitForCacheSync blocks until HasSynced. When the run ends on a
// permanent failure first, it returns an error wrapping that failure
// (matching driver.ErrPermanent). When ctx ends first, the error wraps ctx's error
// and the latest list and watch errors, and says why the cache is not
// synced, for example
//
//	users: cache not synced 30s after start: list: etcdserver: no leader (3 attempts, last 2s ago): context deadline exceeded
//	users: cache not synced 50s after start: the list has been running for 50s: context deadline exceeded
//
// or that the informer was never started (see SyncStatus).
func (i *SharedIndexInformer[T]) WaitForCacheSync(ctx context.Context) error {
	for {
		ch := i.queue.Changed()
		if i.checkSynced() {
			return nil
		}
		i.mu.Lock()
		failure := i.failure
		i.mu.Unlock()
		select {
		case <-ch:
			continue
		case <-i.syncedCh:
			// Synced by followQueue on a change the queue's Changed does
			// not report (a warm start whose target was reached as it was
			// read): waiting for the next change would add up to a
			// progress interval.
			return nil
		case <-failure.done:
			return fmt.Errorf("%s: cache not synced: %w", i.name, failure.err)
		case <-ctx.Done():
		}
		break
	}
	st := i.SyncStatus()
	if !st.Started {
		return fmt.Errorf("%s: cache not synced, the informer was never started: %w", i.name, ctx.Err())
	}
	why := st.why()
	if why == "" {
		if st.Running {
			why = "the list has not finished"
		} else {
			why = "the informer is not running"
		}
	}
	return st.waitError(fmt.Sprintf("%s: cache not synced %v after start: %s", i.name, roundDuration(st.At.Sub(st.RunStarted)), why), ctx.Err())
}

// WaitForCacheSync blocks until HasSynced. When ctx ends first, the error
// says why (see SharedIndexInformer.WaitForCacheSync) or that this handler
// is still working through its initial adds.
func (r *Registration[T]) WaitForCacheSync(ctx context.Context) error {
	if err := r.l.inf.WaitForCacheSync(ctx); err != nil {
		return err
	}
	for {
		r.l.mu.Lock()
		if r.l.initialPending == 0 || r.l.removed {
			r.l.mu.Unlock()
			return nil
		}
		if r.l.initialCh == nil {
			r.l.initialCh = make(chan struct{})
		}
		ch, left := r.l.initialCh, r.l.initialPending
		r.l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s: handler %s has %d initial notifications left: %w", r.l.inf.name, r.l.name, left, ctx.Err())
		}
	}
}

// HasSynced reports whether the cache holds a complete list. As in
// client-go it stays true once it became true, also across restarts and
// after a run ended, on a permanent failure too: code that waits for the
// sync at startup keeps working. Whether the cache still follows its
// source is Live.
func (i *SharedIndexInformer[T]) HasSynced() bool { return i.checkSynced() }

// Live reports whether the cache follows its source now: the informer runs,
// has synced and has not failed permanently. A cache whose run ended (its
// context, or an error matching driver.ErrPermanent: a dropped table, a change
// that does not decode under StopOnUndecodable) stays readable but frozen
// at AppliedVersion, and Live is false; SyncStatus.Stopped holds the
// failure.
func (i *SharedIndexInformer[T]) Live() bool {
	i.mu.Lock()
	running := i.running
	i.mu.Unlock()
	return running && i.stopped() == nil && i.checkSynced()
}

// stopped returns the permanent failure that ended (or is ending) the
// current or last run, nil when there is none.
func (i *SharedIndexInformer[T]) stopped() error {
	i.mu.Lock()
	f := i.failure
	i.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// failBeforeStartLocked fails a run that cannot start permanently, like
// one that ended: SyncStatus and WaitForCacheSync say why, not "not
// started". Called with i.mu held; returns the run's error.
func (i *SharedIndexInformer[T]) failBeforeStartLocked(err error) error {
	err = driver.Permanent(err)
	if i.failure.err != nil {
		i.failure = &runFailure{done: make(chan struct{})}
	}
	i.failure.err = err
	close(i.failure.done)
	return err
}

// SyncStatus is where an informer's list and watch stand and, when it
// waits, why. SharedIndexInformer.SyncStatus takes it; String says it in
// one line; the errors of WaitForCacheSync and WaitFor say the same.
type SyncStatus struct {
	// At is when the status was taken, on the informer's clock.
	At time.Time
	// Started reports that the informer has been run; Running, that it
	// runs now.
	Started, Running bool
	// RunStarted is when the current (or last) run began.
	RunStarted time.Time
	// Synced is HasSynced.
	Synced bool
	// Stopped is the permanent failure (matching driver.ErrPermanent) that ended
	// the current or last run, or kept the last Run from starting (Started
	// false: options that cannot work); nil when none did. The cache is then frozen
	// at AppliedVersion until the informer runs again.
	Stopped error
	// ListStarted is when the list in progress began; zero when no list is
	// running.
	ListStarted time.Time
	// ListFailures are the lists that failed since the last successful
	// one (of the current or last run).
	ListFailures Failures
	// WatchFailures are the watches that failed (expired, stuck, or
	// broken) since a watch last delivered anything, change or bookmark.
	// A planned watch timeout is not a failure.
	WatchFailures Failures
	// LastSyncResourceVersion is the version of the last list or watch
	// batch received; AppliedVersion, the version up to which the cache
	// is applied.
	LastSyncResourceVersion, AppliedVersion ResourceVersion
	// LastDecodeError is the last change that did not decode (or that
	// Transform rejected), reported at LastDecodeErrorAt; nil when none
	// did. It names source, key and version, never the value.
	LastDecodeError   *driver.DecodeError
	LastDecodeErrorAt time.Time
	// Source is the kind of the informer's source (SharedIndexInformer.Source).
	Source string
	// Checkpoints is what the informer's checkpoints are doing; nil when
	// InformerOptions.Checkpoint is not set.
	Checkpoints *CheckpointStatus
	// Checkpoint is the version of the checkpoint the current (or last)
	// run started from (InformerOptions.Checkpoint); 0 when it listed. While
	// not Synced, the cache serves that checkpoint and catches up.
	Checkpoint ResourceVersion
	// Audit is the latest consistency audit's result
	// (InformerOptions.Audit, AuditNow); nil when none ran.
	Audit *AuditResult
	// SchemaChanges are the changes of the source's schema that reached
	// the informer (see driver.SchemaChange); nil when none did.
	SchemaChanges *SchemaChanges
}

// Failures describes consecutive failed attempts (to list, or to watch).
type Failures struct {
	// Count is how many attempts failed in a row; 0 means none since the
	// last success.
	Count int
	// Last is the latest attempt's error, as the error handler received
	// it: it names the informer and wraps the source's own error.
	Last error
	// At is when the latest attempt failed.
	At time.Time

	what  string // "list", "watch from version 5"
	cause error  // the source's error
}

func (f failures) export() Failures {
	return Failures{Count: f.count, Last: f.err, At: f.at, what: f.what, cause: f.cause}
}

// String says in one line whether the informer is synced and what its
// list and watch are waiting for, for example "not synced: list:
// etcdserver: no leader (3 attempts, last 2s ago)".
func (s SyncStatus) String() string {
	if !s.Started && s.Stopped != nil {
		return fmt.Sprintf("did not start: %v", s.Stopped)
	}
	if !s.Started {
		return "not started"
	}
	why := s.why()
	switch {
	case s.Stopped != nil && s.Synced:
		return fmt.Sprintf("stopped: %v (the cache is frozen at version %d)", s.Stopped, s.AppliedVersion)
	case s.Stopped != nil:
		return fmt.Sprintf("stopped before it synced: %v", s.Stopped)
	case s.Synced && !s.Running:
		return fmt.Sprintf("synced, not running (the cache is frozen at version %d)", s.AppliedVersion)
	case s.Synced && why == "":
		return "synced"
	case s.Synced:
		return "synced; " + why
	case why != "":
		return "not synced: " + why
	case s.Running && s.Checkpoint > 0:
		return fmt.Sprintf("not synced: serving checkpoint at version %d, catching up (applied %d)", s.Checkpoint, s.AppliedVersion)
	case s.Running:
		return "not synced: the list has not finished"
	}
	return "not synced: the informer is not running"
}

// why says what the list and the watch are waiting for; "" when neither
// is failing nor a list is running.
func (s SyncStatus) why() string {
	var parts []string
	if !s.ListStarted.IsZero() {
		p := "the list has been running for " + roundDuration(s.At.Sub(s.ListStarted)).String()
		if f := s.ListFailures; f.Count > 0 {
			p += fmt.Sprintf(" (attempt %d; the last failed %v ago: %v)", f.Count+1, roundDuration(s.At.Sub(f.At)), f.cause)
		}
		parts = append(parts, p)
	} else if f := s.ListFailures; f.Count > 0 {
		parts = append(parts, f.describe(s.At))
	}
	if f := s.WatchFailures; f.Count > 0 {
		parts = append(parts, f.describe(s.At))
	}
	return strings.Join(parts, "; ")
}

// describe is "list: no leader (3 attempts, last 2s ago)".
func (f Failures) describe(now time.Time) string {
	attempts := "1 attempt"
	if f.Count > 1 {
		attempts = fmt.Sprintf("%d attempts", f.Count)
	}
	return fmt.Sprintf("%s: %v (%s, last %v ago)", f.what, f.cause, attempts, roundDuration(now.Sub(f.At)))
}

// waitError is a wait's error: msg, then the error that ended the wait;
// it matches that error and the latest list and watch errors.
func (s SyncStatus) waitError(msg string, ctxErr error) error {
	errs := []error{ctxErr}
	for _, f := range []Failures{s.ListFailures, s.WatchFailures} {
		if f.Count > 0 && f.Last != nil {
			errs = append(errs, f.Last)
		}
	}
	return &waitError{msg: msg + ": " + ctxErr.Error(), errs: errs}
}

type waitError struct {
	msg  string
	errs []error
}

func (e *waitError) Error() string   { return e.msg }
func (e *waitError) Unwrap() []error { return e.errs }

// roundDuration keeps a duration readable in a message: whole seconds
// from 10s, tenths from 1s, milliseconds below.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return max(d, 0)
}

// failures is the latest of consecutive failed attempts to list, or to
// watch: what the sync status and the errors of waits report.
type failures struct {
	err   error  // as reported: "name: list: cause"
	what  string // "list", "watch from version 5"
	cause error  // the source's error, without the prefixes
	count int
	at    time.Time
}

func (f *failures) add(err error, what string, cause error, at time.Time) {
	f.err, f.what, f.cause, f.at = err, what, cause, at
	f.count++
}

// LastListError is the error of the last failed list of the current or last
// run, nil after a successful list. SyncStatus tells more: how many
// attempts failed and when, whether a list is running, and the watch's
// failures.
func (i *SharedIndexInformer[T]) LastListError() error {
	i.mu.Lock()
	r := i.reflector
	i.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.LastListError()
}

// SyncStatus returns where the informer's list and watch stand and, when
// it is waiting, why (SyncStatus.String says it in one line).
func (i *SharedIndexInformer[T]) SyncStatus() SyncStatus {
	i.mu.Lock()
	st := SyncStatus{
		At:         i.clk.Now(),
		Started:    i.started,
		Running:    i.running,
		RunStarted: i.runStarted,
	}
	r := i.reflector
	i.mu.Unlock()
	if r != nil {
		r.status(&st)
	}
	st.Synced = i.checkSynced()
	st.Stopped = i.stopped()
	st.Source = i.Source()
	st.LastDecodeError, st.LastDecodeErrorAt = i.rep.lastDecodeError()
	st.Checkpoints = i.checkpointStatus()
	if ws := i.warm.Load(); ws != nil {
		st.Checkpoint = ws.from
	}
	st.AppliedVersion = i.queue.AppliedVersion()
	st.Audit = i.lastAudit.Load()
	st.SchemaChanges = i.rep.schema.get()
	return st
}

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
