package driver

import (
	"context"
	"iter"

	"github.com/dbinformer/dbinformer/core/codec"
)

// CodecProvider is implemented by a ListerWatcher that can say which Codec
// turns its objects into bytes and back; a checkpoint uses it when
// core.CheckpointOptions.Codec is nil.
type CodecProvider[T any] interface {
	Codec() codec.Codec[T]
}

// Restorer is implemented by a ListerWatcher that parks state between
// watches (see "State parked between watches" in the contract) and can
// rebuild it from the objects of a checkpoint. A warm start calls Restore
// as soon as the checkpoint's header gives rv, while the objects are still
// being read, and before Watch(from rv); the adapter parks what it needs
// at exactly rv. Ranging over objects waits until they are loaded, and
// yields none if the checkpoint turns out unusable: the informer then
// lists instead, as after a cold start. An error from Restore makes the
// informer relist (reporting the error), with the loaded objects still
// served meanwhile. A ListerWatcher
// whose Watch(from) needs no parked state (etcd, Kubernetes, NATS, which
// rebuild it from the source) does not implement it.
type Restorer[T any] interface {
	Restore(ctx context.Context, rv ResourceVersion, objects iter.Seq2[string, T]) error
}

// DurableAcknowledger is implemented by a ListerWatcher that acknowledges
// positions to its server so that the server may discard what comes before
// (the Postgres slot's confirmed flush). With checkpoints on, a position
// acknowledged past the last durable checkpoint would lose, after a crash,
// the changes the next warm start needs. The informer calls
// GateAcknowledgements(true) before its first list or watch, and
// AcknowledgeDurable(rv) after each checkpoint at rv is durable; the
// adapter then acknowledges no position past the last such rv.
type DurableAcknowledger interface {
	GateAcknowledgements(gated bool)
	AcknowledgeDurable(rv ResourceVersion)
}

// AuditLister is implemented by a ListerWatcher that can read its source
// as of one version into a sink that is not the cache: what the consistency
// audit (core.InformerOptions.Audit) compares the cache with.
//
// AuditList reads one consistent snapshot of the source at a version C and
// returns C. It calls sink.Emit with an Added event for every object of the
// snapshot (Err set for one that does not decode), as List does. A source
// that reads a change stream up to C (NATS KV) may emit a key more than
// once, and emit a Deleted event for a key absent at C: the last event of
// a key is its state at C, so that no source needs to hold the snapshot in
// memory to deduplicate it. C must
// be at least atLeast (the version the cache had applied when the audit
// began; a source that cannot serve it, such as a replica that lags,
// returns an error rather than an older snapshot). Unlike List it must
//
//   - have no effect on watches, on state parked for them (see "State parked
//     between watches") or on the source beyond the read: it runs while the
//     informer watches, from another goroutine, concurrently with List and
//     Watch;
//   - read in pages of bounded size (an etcd range with a limit, a kube
//     List with limit and continue, a JetStream consumer with a bounded
//     window): a million-object source is never asked for one response;
//   - tolerate a slow sink: the audit paces itself by blocking in Emit. A
//     snapshot that expires meanwhile (compaction, a continue token that
//     expired) ends AuditList with an error matching ErrExpired, and the
//     audit reports the run as failed and tries again next period.
//
// etcd reads a paginated range at a revision, NATS KV a stream up to a
// sequence, kube a paginated List whose first page fixes the
// resourceVersion. A wrapper whose List emits something else than what it
// wraps lists (filter.Wrap keeps only matching objects) implements
// AuditList itself, listing through its own rule, or the audit would
// report every object it hides as missing from the cache.
type AuditLister[T any] interface {
	AuditList(ctx context.Context, atLeast ResourceVersion, sink ListSink[T]) (ResourceVersion, error)
}

// AuditRechecker is implemented by an AuditLister whose source can remove
// an object without a change of its own: a NATS KV bucket's MaxAge, or a
// purge below a sequence, drops a key's value and leaves nothing a watch
// delivers. The audit's rule, that a key the cache has not changed since
// the snapshot's version C holds its state at C, then fails for a key the
// cache never held: the informer reaches C without it (rightly: the key is
// gone) while the snapshot still had it.
//
// So before a run reports a key as missing from the cache or differing,
// and before it heals one, it asks AuditUnchanged whether the source still
// holds the object its AuditList emitted for key, at version rv (that
// event's RV). A key the source no longer holds that way changed after C:
// it is counted in flight, never reported or healed (a heal would put back
// an object the source dropped). An error fails the run. At most MaxHeal
// keys are asked; any beyond are reported unasked.
type AuditRechecker interface {
	AuditUnchanged(ctx context.Context, key string, rv ResourceVersion) (bool, error)
}

// SchemaChange is implemented by an adapter's error for a change of the
// source's schema that reached the informer (pginformer.SchemaChangeError:
// a mapped column dropped, renamed or retyped, a table dropped or out of
// the publication). The informer keeps the last one in core.SyncStatus
// (SchemaChanges), counts each for metrics that implement core.SchemaMetrics,
// and then does what the error says as with any other: a relist (it
// matches ErrExpired) or a stop (ErrPermanent).
type SchemaChange interface {
	error
	// SchemaAction says what was done about the change: "relist" or
	// "fail".
	SchemaAction() string
}
