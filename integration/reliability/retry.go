package reliability

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Retry calls f until it succeeds; a write may fail while a fault lasts
// (the direct connection broken by a restart). It gives up after a minute.
func Retry(t testing.TB, ctx context.Context, what string, f func(context.Context) error) {
	t.Helper()
	retryEach(t, ctx, what, 10*time.Second, f)
}

// retryEach is retry with each attempt bounded by attempt.
func retryEach(t testing.TB, ctx context.Context, what string, attempt time.Duration, f func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var err error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, attempt)
		err = f(cctx)
		cancel()
		if err == nil || errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: still failing after a minute: %v", what, err)
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
