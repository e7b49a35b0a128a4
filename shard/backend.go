package shard

import (
	"context"
	"errors"
	"time"
)

// Backend is where replicas register as members and own shards: NewEtcd,
// NewPostgres, NewKube and NewNATS. Its contract is what makes ownership exclusive, so a
// backend of your own must keep all of it.
type Backend interface {
	// Join registers self as a member for ttl and returns the session. It
	// fails while a live session of another replica holds the same ID.
	Join(ctx context.Context, self Member, ttl time.Duration) (Session, error)
	// String names the backend in logs and errors (no secrets).
	String() string
}

// Session is one membership of one replica: a lease that expires ttl
// after the server last renewed it, with the shards owned under it.
type Session interface {
	// Renew extends the lease to ttl after the server receives the
	// request (so that the caller, measuring from before it sent the
	// request, never believes in a lease the server already expired). It
	// returns an error matching ErrSessionLost when the lease is gone.
	Renew(ctx context.Context) error
	// Members returns the members whose lease is live, in any order.
	Members(ctx context.Context) ([]Member, error)
	// Acquire takes shard if no live session owns it (it was released, or
	// its owner's lease expired) and returns the term it is now owned
	// under: higher than every earlier term of the shard. ok is false
	// when another live session owns it.
	Acquire(ctx context.Context, shard int) (term uint64, ok bool, err error)
	// Release gives shard up if it is still owned under term.
	Release(ctx context.Context, shard int, term uint64) error
	// Changed, if not nil, signals (without guarantee of one signal per
	// change) that members or owners changed, so that the caller looks
	// again before its next period.
	Changed() <-chan struct{}
	// Close ends the session: the member leaves and its shards are
	// released.
	Close(ctx context.Context) error
}

// ErrSessionLost is matched by Session errors when the session's lease
// expired (the replica was frozen, partitioned or too slow to renew); the
// Sharder drops every shard and joins again.
var ErrSessionLost = errors.New("shard: membership lease lost")

// ErrFenced is matched by the errors of the backends' fencing checks when
// the shard is no longer owned under the given term.
var ErrFenced = errors.New("shard: fenced: the shard is no longer owned under this term")
