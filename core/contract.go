package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// ResourceVersion is a position in a source's history. Every source this
// library supports numbers its changes with one totally ordered integer (etcd
// revision, Postgres commit LSN, JetStream stream sequence, Kubernetes
// resourceVersion), so versions compare with < and ==, which is what lets an
// informer answer WaitFor(rv). Zero means "no version": before everything.
type ResourceVersion uint64

// String formats the version as a decimal number.
func (v ResourceVersion) String() string { return strconv.FormatUint(uint64(v), 10) }

// ParseResourceVersion parses a decimal resource version, such as the
// metadata.resourceVersion of a Kubernetes object. A version that is not a
// plain unsigned decimal number is an error: a source whose versions cannot be
// ordered cannot be watched correctly, and guessing would silently misorder.
func ParseResourceVersion(s string) (ResourceVersion, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("dbinformer: resource version %q is not an unsigned decimal number: %w", s, err)
	}
	return ResourceVersion(n), nil
}

// EventType says what happened to a key.
type EventType uint8

const (
	// Added: the key came into existence (or, in a List, is present).
	Added EventType = iota + 1
	// Modified: the key's object changed.
	Modified
	// Deleted: the key is gone. Event.Object holds the last known object
	// when Event.HasObject is true; otherwise only the key is known and the
	// informer fills in the object from its cache.
	Deleted
	// Bookmark: no key changed, but every change up to Event.RV has been
	// delivered. Key and Object are empty.
	Bookmark
)

// String returns the name of the event type.
func (t EventType) String() string {
	switch t {
	case Added:
		return "Added"
	case Modified:
		return "Modified"
	case Deleted:
		return "Deleted"
	case Bookmark:
		return "Bookmark"
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// Event is one change reported by a ListerWatcher.
type Event[T any] struct {
	Type EventType
	// Key identifies the object within its source: the etcd key below the
	// prefix, the encoded primary key, the KV key, namespace/name.
	Key string
	// Object is the new state for Added and Modified, and the last known
	// state for Deleted when HasObject is true.
	Object T
	// HasObject reports whether Object is meaningful. Always true for Added
	// and Modified events that decoded; for Deleted it tells whether the
	// source still had the previous value.
	HasObject bool
	// RV is the version at which this change happened. Events of one
	// transaction share an RV.
	RV ResourceVersion
	// Err is non-nil when the adapter saw a change it could not turn into an
	// Object (a value that does not decode, a column with no mapping). Type,
	// Key and RV still say where; the informer reports the error through its
	// error path and keeps going. Err is usually a *DecodeError.
	Err error
}

// ListerWatcher is the contract between the core and a source adapter. An
// adapter only reports what the source says; retry, backoff, relist and
// resync are the core's policy.
type ListerWatcher[T any] interface {
	// List reads one consistent snapshot of the source: it calls
	// opts.Emit with an Added event for every object in it (in any order,
	// paginating as the adapter sees fit) and returns the version at which the
	// snapshot was taken. Watch(ctx, thatVersion) must then deliver exactly
	// the changes after the snapshot. Emit is called from one goroutine at a
	// time (never concurrently) and only before List returns. If Emit
	// returns an error, List stops and returns it.
	List(ctx context.Context, opts ListOptions[T]) (ResourceVersion, error)

	// Watch delivers every change strictly after from, in version order,
	// none missing and none repeated, until ctx is done or the watch fails.
	// If the source can no longer serve changes after from (compacted,
	// expired, slot lost), Watch or Watcher.Next returns an error that
	// matches ErrExpired and the caller relists.
	Watch(ctx context.Context, from ResourceVersion) (Watcher[T], error)
}

// ListOptions carries the callbacks of one List call.
type ListOptions[T any] struct {
	// Emit receives each object of the snapshot as an Added event. An event
	// with Err set reports an object that could not be decoded.
	Emit func(Event[T]) error
	// Estimate, when non-nil, is given the source's estimate of how many
	// objects the snapshot holds (for example planner statistics), so that
	// a caller can show initial-sync progress. Adapters that cannot estimate
	// never call it.
	Estimate func(objects int64)
}

// Watcher is one open watch.
type Watcher[T any] interface {
	// Next blocks until the next batch of events, in version order. A batch
	// is never empty; events of one source transaction arrive in one batch.
	// The returned slice belongs to the caller. Next returns an error when
	// the watch ends: ctx.Err() or the watch's context error when cancelled,
	// an error matching ErrExpired when the position is gone, anything else
	// for a failure the caller may retry from the last version it applied.
	Next(ctx context.Context) ([]Event[T], error)
	// Stop ends the watch and releases its resources. It may be called
	// more than once and concurrently with Next, which then returns.
	Stop()
}

// ProgressRequester is implemented by a Watcher that can be asked for a
// Bookmark: after RequestProgress, the watch delivers a Bookmark whose RV is
// at least the source's head at the time of the request (etcd
// RequestProgress, a NATS consumer with nothing pending, a Postgres keepalive
// with nothing pending). The informer uses it to serve WaitFor for a version
// that touched no watched key.
type ProgressRequester interface {
	RequestProgress(ctx context.Context) error
}

// HeadReader is implemented by a ListerWatcher that can tell the newest
// version of its source, used for lag metrics and by tests that wait for the
// cache to catch up.
type HeadReader interface {
	Head(ctx context.Context) (ResourceVersion, error)
}

// ErrExpired is matched (with errors.Is) by the error a source returns when
// it cannot resume from the requested version: etcd compaction, a lost
// Postgres slot, a JetStream stream whose first sequence has passed it,
// Kubernetes 410 Gone. The reflector then relists from scratch.
var ErrExpired = errors.New("dbinformer: resource version expired")

// DecodeError reports a change that an adapter could not decode. It names
// the source, the key and the version, never the raw bytes (which may hold
// secrets) beyond what Err says.
type DecodeError struct {
	Source string // e.g. `etcd prefix "/app/"`, `postgres table "public"."users"`
	Key    string
	RV     ResourceVersion
	Err    error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%s: key %q at version %d: %v", e.Source, e.Key, e.RV, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }
