// Package natsinformer is the NATS JetStream adapter of dbinformer: a
// core.ListerWatcher over a key-value bucket (NewKV) and one over a stream
// used as an event log, folded into per-key state by a reducer
// (NewEventStream). The resource version is the stream sequence (for a
// bucket, the KV revision), so WaitFor(rev) works with the revision a
// kv.Put returned.
//
// # Import name
//
// The directory is adapters/nats but the package is natsinformer, so that
// it never shadows nats.go's own package nats:
//
//	import (
//		"github.com/nats-io/nats.go"
//		"github.com/nats-io/nats.go/jetstream"
//		natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
//	)
//
// # Key-value buckets
//
// List reads the last value of every watched key with an ephemeral consumer
// that delivers the last message per subject and folds whatever arrives
// meanwhile, until the server reports nothing pending; the version returned
// is the highest sequence seen or the stream head read before, whichever is
// higher. Watch(from) is an ephemeral consumer from from+1; DEL and PURGE
// markers (and the markers the server leaves with LimitMarkerTTL) are
// Deleted events carrying only the key (the informer fills in the cached
// object). A put does not say whether the key existed; the watch reports
// Added or Modified from what it has seen. KVOptions.Prefix and
// KVOptions.Filter restrict the keys (NATS token wildcards, validated).
//
// # Event streams
//
// NewEventStream replays a stream (or the subjects of a filter in it) from
// its first message, or from a snapshot and its sequence, through a user
// reducer and reports the state of each entity: the entity key comes from
// the subject (a token position or a function). Watch continues from the
// folded state, so each event becomes Added, Modified or Deleted of that
// state. To know the previous state of an entity, a watch needs the fold
// at its start: List leaves its result with the ListerWatcher, a stopped
// watch leaves the fold at the last version it returned, and Watch(from)
// takes that state when from matches (the informer's watch after a list,
// and its resume after a broken watch). For any other from, Watch replays
// the stream up to from first. So the adapter holds the state of every
// entity once more, beside the informer's cache. A relist replays from the
// start (or the snapshot) again. The reducer also sees server-made marker
// messages (empty data, a Nats-Marker-Reason header) if the stream is
// configured to leave them.
//
// # Expiry and resume
//
// JetStream has no "compacted" error. When the stream's first retained
// sequence has passed from+1 (purge, MaxAge, limits), when from is past its
// last sequence, or when the stream's creation time differs from the one
// the last List read (the stream was deleted and created again), Watch
// returns an error matching core.ErrExpired and the informer relists, which
// turns keys that vanished into deletes. For a bucket, the ListerWatcher
// keeps the revision of every live key (from List, handed from watch to
// watch like the event-stream state) to tell a value that was superseded
// from one that was removed: when a watch resumes from a version whose key
// set it holds, a first sequence past from+1 is expiry only if a key the
// cache holds has lost its value (a bucket with History 1 whose keys were
// rewritten while the watch was away resumes without a relist; the watch
// then reports each key's newest value, not every intermediate one).
//
// A bucket watch checks the same (is the value of a key it holds gone
// without a delete marker: MaxAge without LimitMarkerTTL, a stream purge)
// as soon as its connection is re-established, before it applies messages
// that skip stream sequences or that come after a reconnect, when it is
// idle, and on RequestProgress, and expires if so. The consumer lives on the server and
// outlasts a dropped connection; the server moves it past messages removed
// meanwhile, so a skip in sequence (which a History limit or the key filter
// also cause) or a reconnect is all the watch sees of a purge. The check
// costs one stream-info request per such batch, plus one last-message
// lookup per held key older than the first retained sequence (remembered
// while the newer message is retained). Values removed with the connection
// up and nothing skipped (a purge below the watch's position) are noticed
// at the next such check. Any other trouble (a
// lost connection, a server restart, a consumer sequence gap) ends the watch
// with an ordinary error: the informer watches again from the last version
// it applied, and no relist happens as long as the stream still holds it.
// A watch opened from a version whose key set the ListerWatcher does not
// hold (not the end of its last List or watch) applies the first-sequence
// rule strictly, so with a small History it may relist: correct, only more
// expensive.
//
// # Bookmarks
//
// When a watch is idle (KVOptions.IdleCheck) or asked with RequestProgress
// (the watcher implements core.ProgressRequester), it reads the stream's
// last sequence and, if no message its filter matches lies between its
// position and that sequence, sends a Bookmark there. WaitFor then returns
// for a revision written to another key or outside the filter.
//
// # Setup
//
// A JetStream-enabled server, and a connection whose user may create
// ephemeral consumers on the stream and read stream info and messages
// ($JS.API.STREAM.INFO, CONSUMER.CREATE, CONSUMER.DELETE, DIRECT.GET /
// STREAM.MSG.GET). The bucket or stream must exist: NewKV and
// NewEventStream fail at start with an error naming it. TLS, credentials
// and reconnect policy are the caller's nats.Conn. Consumers are ephemeral,
// in memory, with an inactivity threshold, so a process that dies leaves
// nothing behind for long. Bookmarks use direct gets on buckets (which allow
// them), which in a cluster may be answered by a replica; on a single server
// or R1 stream this is exact.
//
// List holds the raw values of the listed keys until its fold is complete
// (a key written during the List must replace, not follow, its old value),
// then decodes and emits them in revision order and lets them go.
//
// Undecodable values (or reducer errors) arrive as events whose Err is a
// *core.DecodeError naming the bucket or stream, the key and the sequence;
// the watch goes on.
package natsinformer
