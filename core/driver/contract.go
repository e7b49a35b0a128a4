package driver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
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
	// Fill, when non-nil on a Modified event, says that Object lacks some
	// values the source left out of the change because they did not
	// change (Postgres: an unchanged TOASTed column under REPLICA
	// IDENTITY DEFAULT), and completes it: given the object the consumer
	// holds for Key (its previous state, every earlier event of the key
	// applied), it returns the whole new object without modifying either.
	// Its error names the key and the value it could not fill. A wrapper
	// that turns the event into a Deleted leaves it: the informer then
	// takes the last object from its cache. A wrapper that reads Object
	// (a filter) clears WatchOptions.Fills for the watch it wraps. An adapter
	// sets it only on watches whose WatchOptions.Fills is true, never in
	// a List. The core's informer calls it when it applies the event to
	// its cache, in order; with no cached object for Key it reports an
	// error naming the key, and with an error from Fill it drops the key
	// from the cache as an undecodable change (see UndecodablePolicy):
	// never a silently zeroed value.
	Fill func(cached T) (T, error)
}

// ListerWatcher is the contract between the core and a source adapter. An
// adapter only reports what the source says; retry, backoff, relist and
// resync are the core's policy.
//
// Both calls push: List hands the snapshot to sink.Emit, Watch hands each
// batch to opts.Emit. Neither keeps running after it returns, and neither
// calls its Emit concurrently with itself.
//
// Beyond List and Watch, an adapter may implement optional interfaces
// (ProgressReporter, ProgressIntervaler, HealWaiter, HeadReader,
// CodecProvider, Restorer, DurableAcknowledger, AuditLister); the informer finds them
// with Capability. A wrapper of your own (metrics, logging, a filter)
// keeps every one of them when it embeds the ListerWatcher
// (struct{ driver.ListerWatcher[T]; ... }) or has a method
// Unwrap() driver.ListerWatcher[T] returning what it wraps; a wrapper that
// keeps it in a named field and has no Unwrap hides them, and the informer
// then runs without heal wake-ups, stuck-watch detection, WaitFor of an
// untouched version, lag, or a checkpoint's restore and acknowledgement
// gate. A wrapper whose Watch breaks a capability's promise implements
// that interface itself to say so (see Capability).
type ListerWatcher[T any] interface {
	// List reads one consistent snapshot of the source: it calls
	// sink.Emit with an Added event for every object in it (in any order,
	// paginating as the adapter sees fit) and returns the version at which the
	// snapshot was taken. Watch(ctx, thatVersion, ...) must then deliver
	// exactly the changes after the snapshot. Emit is called from one
	// goroutine at a time and only before List returns. If Emit returns an
	// error, List stops and returns it (wrapped or not: errors.Is matches).
	List(ctx context.Context, sink ListSink[T]) (ResourceVersion, error)

	// Watch delivers every change strictly after from, in version order,
	// none missing and none repeated, through opts.Emit, until one of:
	//
	//   - ctx is done: Watch returns an error matching ErrWatchStopped
	//     (build it with Stopped(ctx)), whatever the source was doing;
	//   - the source can no longer serve changes after the last version it
	//     emitted (compacted, expired, slot lost): an error matching
	//     ErrExpired, and the caller relists;
	//   - the source will never serve this watch again (a dropped table, a
	//     deleted bucket, a revoked privilege): an error matching
	//     ErrPermanent (see Permanent), and the caller stops and reports;
	//   - opts.Emit returned an error: Watch returns it (errors.Is matches);
	//   - anything else failed: that error, and the caller resumes with a new
	//     Watch from the last version it was given.
	//
	// Changes received before a failure are emitted before Watch returns the
	// failure. Watch never returns nil.
	Watch(ctx context.Context, from ResourceVersion, opts WatchOptions[T]) error
}

// ListSink receives one List's snapshot.
type ListSink[T any] struct {
	// Emit receives each object of the snapshot as an Added event. An event
	// with Err set reports an object that could not be decoded. Required.
	Emit func(Event[T]) error
	// Estimate, when non-nil, is given the source's estimate of how many
	// objects the snapshot holds (for example planner statistics), so that
	// a caller can show initial-sync progress; an informer also sizes its
	// empty cache by it (up to 8M objects), so give it before the first
	// Emit. Adapters that cannot estimate never call it.
	Estimate func(objects int64)
}

// WatchOptions carries the callbacks of one Watch call.
type WatchOptions[T any] struct {
	// Emit receives each batch of events in version order. A batch is never
	// empty; events of one source transaction arrive in one batch (a batch
	// may hold several transactions). Emit blocks while the consumer is
	// busy; its return means the consumer has taken the batch, which is
	// what an adapter that acknowledges positions to its server (the
	// Postgres slot) may acknowledge. The slice is the consumer's only for
	// the call: the adapter may reuse it once Emit returns. Required.
	Emit func(batch []Event[T]) error
	// Progress, when non-nil, carries the consumer's requests for a
	// Bookmark. A watch of a ListerWatcher that implements ProgressReporter
	// (and reports true) answers each request it receives with a Bookmark
	// whose RV is at least the source's head at the time it received the
	// request; several requests may be answered by one Bookmark. Other
	// watches never read it.
	Progress <-chan struct{}
	// Fills says that the consumer completes events that carry
	// Event.Fill with the object it holds for their key (the core's
	// reflector and informer do). An adapter whose events may lack
	// unchanged values it no longer keeps itself (a Postgres table
	// restored from a checkpoint) sends a watch without Fills no such
	// event: it ends the watch with an error matching ErrExpired instead,
	// and the caller relists.
	Fills bool
}

// ProgressReporter is implemented by a ListerWatcher whose watches answer
// requests on WatchOptions.Progress with a Bookmark (etcd RequestProgress, a
// NATS consumer with nothing pending, a Postgres keepalive with nothing
// pending). The informer uses it to serve WaitFor for a version that
// touched no watched key. A wrapper passes the Progress channel and the
// Bookmarks through, or implements ReportsProgress itself returning false.
type ProgressReporter interface {
	ReportsProgress() bool
}

// ProgressIntervaler is implemented by a ListerWatcher whose open watch
// shows a sign of life at least once per ProgressInterval even when nothing
// changes: a Bookmark (or a change) through WatchOptions.Emit, or, for a
// ProgressReporter, the Bookmark that answers a request on
// WatchOptions.Progress. Examples: etcd progress notifications, a NATS
// consumer's idle heartbeats turned into Bookmarks, Kubernetes watch
// bookmarks, Postgres keepalives (status updates) with nothing pending.
//
// The reflector uses it to tell a stuck watch (a frozen server, a half-open
// connection) from a quiet one. After one interval without any Emit it asks
// a ProgressReporter's watch for a Bookmark, again after each further
// interval, and after StuckIntervals intervals without an Emit it cancels
// the watch and reopens it from the last version (no relist), reporting an
// error matching ErrWatchStuck. A healthy idle watch therefore is never
// restarted as long as it answers the request, or emits on its own, within
// StuckIntervals-1 intervals. Time spent inside Emit (a busy consumer) is
// not silence, and neither is time this process did not run (stopped by
// SIGSTOP, a long stop-the-world pause, a suspended VM: seen as the
// watchdog's timer firing more than half an interval late). Zero or a negative value means the source promises nothing:
// no stuck-watch detection. core.InformerOptions.ProgressInterval overrides it.
type ProgressIntervaler interface {
	ProgressInterval() time.Duration
}

// StuckIntervals is how many progress intervals (see ProgressIntervaler) a
// watch may stay silent before the reflector treats it as stuck.
const StuckIntervals = 3

// ErrWatchStuck is matched by the error with which the reflector ends a
// watch that stayed silent for StuckIntervals progress intervals (see
// ProgressIntervaler). It is reported through the error handler (logged at
// Warn without one) and to InformerMetrics.WatchRestarted, and the watch is
// reopened from the last version.
var ErrWatchStuck = errors.New("dbinformer: watch stuck")

// HealWaiter is implemented by a ListerWatcher that can tell when its
// source is reachable again after a failure (a client reconnected, a leader
// was elected, the server answered a probe). While the reflector backs off
// after a failed List or Watch, it runs WaitHealed beside its sleep and
// retries at once when WaitHealed returns nil: the source was down and is
// back. Any error (the source never was down, a permanent failure, ctx
// done: the reflector cancels ctx when the sleep ends) leaves the sleep as
// it is, so that a source that answers and fails, again and again, still
// backs off.
type HealWaiter interface {
	WaitHealed(ctx context.Context) error
}

// SupersededSkipper is implemented by a ListerWatcher whose watch may skip
// a change that a later change of the same key removed from the source
// before the watch read it (a NATS KV bucket, or a stream keeping the last
// message per subject): a change it delivers at version V then does not
// prove that every change before V was delivered (a skipped one's
// successor may still be on its way), nor does a List's version (a key
// whose message it skipped is missing from it until the watch delivers
// the later one), so the informer counts a version applied only once a
// Bookmark reaches it. Such a watch must send a Bookmark at V only when it
// has delivered every change up to V or its successor; WaitFor asks it for
// one (ProgressReporter).
type SupersededSkipper interface {
	SkipsSuperseded() bool
}

// HeadReader is implemented by a ListerWatcher that can tell the newest
// version of its source, used for lag metrics and by tests that wait for the
// cache to catch up.
type HeadReader interface {
	Head(ctx context.Context) (ResourceVersion, error)
}

// State parked between watches.
//
// Some adapters keep, beside the informer's cache, state that a watch needs
// and that the cache does not hold: the NATS KV adapter the revision of each
// key (to tell a purge it missed), the NATS event-stream adapter the
// reducer's folded state, the Postgres adapter each table's keys and the
// values pgoutput may leave out (unchanged TOAST). Such state belongs to the
// position it was built at. The rule for handing it to the next Watch is:
//
//   - List builds it from scratch and parks it at the version List
//     returns;
//   - Watch parks it at the last version it emitted before returning;
//   - Watch(from) takes over the parked state only if it was parked at
//     exactly from; any other from (an older checkpoint, another caller)
//     finds no usable state and returns an error matching ErrExpired unless
//     it can rebuild the state from the source at from, so that the caller
//     relists rather than watching with a shadow that belongs elsewhere;
//   - only one watch holds the state at a time: a second concurrent Watch of
//     the same ListerWatcher must not share it; it rebuilds state of its own
//     (an adapter whose kept state is exact at every version of a retained
//     window, as the Postgres adapter's History, can serve both) or returns
//     ErrExpired. The conformance suite runs concurrent watches.

// ErrExpired is matched (with errors.Is) by the error a source returns when
// it cannot resume from the requested version: etcd compaction, a lost
// Postgres slot, a JetStream stream whose first sequence has passed it,
// Kubernetes 410 Gone. The reflector then relists from scratch.
var ErrExpired = errors.New("dbinformer: resource version expired")

// ErrWatchStopped is matched (with errors.Is) by what Watch returns when its
// context is done. Build it with Stopped.
var ErrWatchStopped = errors.New("dbinformer: watch stopped")

// Stopped returns the error a Watch returns when ctx is done: it matches
// ErrWatchStopped and the context's cause (context.Canceled,
// context.DeadlineExceeded or the cause given to the cancel function).
func Stopped(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.Canceled
	}
	return &stoppedError{cause: cause}
}

type stoppedError struct{ cause error }

func (e *stoppedError) Error() string        { return "dbinformer: watch stopped: " + e.cause.Error() }
func (e *stoppedError) Is(target error) bool { return target == ErrWatchStopped }
func (e *stoppedError) Unwrap() error        { return e.cause }

// ErrPermanent is matched by an error that retrying cannot cure: the watched
// table was dropped, the bucket deleted, the privilege revoked. The
// reflector stops, the informer reports it (WaitForCacheSync returns it) and
// Run returns it. Mark an error permanent with Permanent.
var ErrPermanent = errors.New("dbinformer: permanent failure")

// Permanent marks err as permanent: the result matches ErrPermanent and
// still matches (and unwraps to) err. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }
func (e *permanentError) Unwrap() error        { return e.err }

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
