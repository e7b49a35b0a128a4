package core

import (
	"context"
	"errors"
	"fmt"
	"time"
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
// (matching ErrPermanent). When ctx ends first, the error wraps ctx's error
// and says why the cache is not synced: the last list error, or that the
// informer was never started.
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
		case <-failure.done:
			return fmt.Errorf("%s: cache not synced: %w", i.name, failure.err)
		case <-ctx.Done():
		}
		break
	}
	i.mu.Lock()
	started := i.started
	i.mu.Unlock()
	if !started {
		return fmt.Errorf("%s: cache not synced, the informer was never started: %w", i.name, ctx.Err())
	}
	if le := i.LastListError(); le != nil {
		return fmt.Errorf("%s: cache not synced: %w; last list error: %w", i.name, ctx.Err(), le)
	}
	return fmt.Errorf("%s: cache not synced (the list has not finished): %w", i.name, ctx.Err())
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
