package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Term is one period of leadership.
type Term struct {
	// Epoch is the fencing token of the term: it is higher for every later
	// term of the same election held by another candidate (etcd: the revision at which the leader key
	// was created; Postgres: the transaction id read once the lock was
	// taken; Kubernetes: the Lease's leaseTransitions after taking it, plus
	// one). Hand it to whatever the leader writes so that a deposed leader,
	// still running for a moment, can be refused.
	Epoch uint64
	// Identity is this candidate's identity, as the election records it.
	Identity string
}

// Elector runs a function while this process is the leader.
type Elector interface {
	// Run campaigns until this candidate is elected and then calls lead
	// with a context that is cancelled (cause ErrLost) as soon as the
	// leadership is lost: the session, lock connection or lease is gone,
	// or could not be renewed within its period. When lead returns after
	// losing, Run campaigns again. When lead returns while still leader,
	// Run gives up the leadership at once (so that another candidate takes
	// over without waiting for a timeout) and returns what lead returned.
	// When ctx ends, Run cancels lead's context, waits for it to return,
	// gives up the leadership and returns nil. Errors of the election
	// itself (the server unreachable) are logged and retried with backoff.
	Run(ctx context.Context, lead func(ctx context.Context, t Term) error) error
}

// ErrLost is the cause of a lead context cancelled because the leadership
// was lost (context.Cause tells it from the end of Run's own context).
var ErrLost = errors.New("leader: leadership lost")

// held is one term, as an implementation reports it.
type held struct {
	term Term
	// lost is closed when the leadership is lost.
	lost <-chan struct{}
	// resign gives the leadership up (best effort) and releases resources.
	resign func()
}

// campaigner is what each implementation provides: block until elected
// (or ctx ends), returning the term.
type campaigner interface {
	campaign(ctx context.Context) (*held, error)
	what() string
}

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

func run(ctx context.Context, c campaigner, log *slog.Logger, lead func(context.Context, Term) error) error {
	if lead == nil {
		return fmt.Errorf("%s: Run needs a lead function", c.what())
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	backoff := minBackoff
	for {
		if ctx.Err() != nil {
			return nil
		}
		h, err := c.campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("leader election failed; retrying", "election", c.what(), "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		backoff = minBackoff
		log.Info("elected leader", "election", c.what(), "identity", h.term.Identity, "epoch", h.term.Epoch)
		lctx, cancel := context.WithCancelCause(ctx)
		done := make(chan error, 1)
		go func() { done <- lead(lctx, h.term) }()
		var lerr error
		lost := false
		select {
		case lerr = <-done:
		case <-h.lost:
			lost = true
			cancel(ErrLost)
			lerr = <-done
		}
		cancel(nil)
		h.resign()
		if ctx.Err() != nil {
			return nil
		}
		if lost {
			log.Warn("leadership lost", "election", c.what(), "identity", h.term.Identity, "epoch", h.term.Epoch, "lead_returned", lerr)
			continue
		}
		return lerr
	}
}
