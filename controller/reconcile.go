package controller

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Reconciler makes the world match the desired state of one key. It reads
// that state from informer caches (never from a queue of events: a key
// changed five times before a worker took it is reconciled once, against
// its latest state) and must be idempotent: the same key may be reconciled
// again at any time, after a retry, a resync or a failover.
type Reconciler[K comparable] interface {
	Reconcile(ctx context.Context, key K) (Result, error)
}

// Func adapts a function to a Reconciler.
type Func[K comparable] func(ctx context.Context, key K) (Result, error)

// Reconcile calls f.
func (f Func[K]) Reconcile(ctx context.Context, key K) (Result, error) { return f(ctx, key) }

// Result is what a successful reconcile asks for next.
type Result struct {
	// RequeueAfter > 0 reconciles the key again after this long (polling an
	// external system, an expiry). The retry backoff is reset first: this is
	// a success, not a failure.
	RequeueAfter time.Duration
}

// terminalError marks an error the controller must not retry.
type terminalError struct{ err error }

func (e *terminalError) Error() string { return "terminal: " + e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrTerminal) true for every terminal error.
func (e *terminalError) Is(target error) bool { return target == ErrTerminal }

// ErrTerminal matches (errors.Is) every error made by Terminal.
var ErrTerminal = errors.New("controller: terminal error")

// Terminal wraps err so that the controller reports it and does not retry
// the key (controller-runtime's reconcile.TerminalError): the key's state is
// invalid and retrying cannot help until it changes, which enqueues it
// again. Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err: err}
}

// PanicError is a panic recovered from a reconcile. The controller counts
// it (result "panic"), reports it and retries the key with backoff, as it
// would an error: one bad key must not take the process down.
type PanicError struct {
	Controller string
	Key        string
	Value      any
	Stack      []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("controller %q: reconcile of %s panicked: %v", e.Controller, e.Key, e.Value)
}

// Result labels, as the reconciles metric and the logs name them.
const (
	ResultSuccess  = "success"  // nil error, no requeue
	ResultRequeue  = "requeue"  // nil error, Result.RequeueAfter > 0
	ResultError    = "error"    // an error, retried with backoff
	ResultTerminal = "terminal" // a Terminal error, not retried
	ResultPanic    = "panic"    // a recovered panic, retried with backoff
	ResultDropped  = "dropped"  // an error after Options.MaxRetries retries, given up
)

// results lists every label, so that each metric is made up front.
var results = []string{ResultSuccess, ResultRequeue, ResultError, ResultTerminal, ResultPanic, ResultDropped}
