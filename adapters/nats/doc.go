// Package natsinformer is the NATS JetStream adapter of dbinformer: a
// driver.ListerWatcher over a key-value bucket (NewKV) and one over a stream
// used as an event log, folded into per-key state by a reducer
// (NewEventStream). The resource version is the stream sequence (for a
// bucket, the KV revision), so WaitFor(rev) works with the revision a
// kv.Put returned. Most programs need only NewKV (or NewEventStream) and
// a core.SharedIndexInformer over it.
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
// A stream whose every message already is its entity's whole state (one
// message kept per subject, as a relay stream) needs no fold:
// EventStreamOptions.Stateless keeps none. Its reducer only parses (it is
// never given a previous state), a watch starts at its version without
// replaying anything before it and reports puts as Added (the informer
// tells adds from updates by its cache), and a List keeps each entity's
// last state only while it lists.
//
// # Partial sync
//
// KVOptions.Where and EventStreamOptions.Where (package filter) sync only
// part of a bucket or of the folded entities. One condition on filter.Key
// is pushed down as the consumers' subject filter, so the server sends only
// those subjects: for a KV, filter.Eq(filter.Key, k) or a whole-token
// filter.Prefix(filter.Key, "eu.") (when KVOptions.Filter is empty); for an
// event stream, filter.Eq(filter.Key, id) filling the "*" key token of
// EventStreamOptions.Filter. The rest of the filter is evaluated here, on
// each decoded value or folded state: those messages are still sent and
// decoded (or folded; an event stream keeps every entity's state, since a
// later event may make it match). A key that starts matching reaches
// handlers as an add, one that stops as a delete carrying its last matching
// state. A condition marked filter.Server that cannot be pushed down is
// refused by the constructor.
//
// # Watches
//
// Watch pushes batches to WatchOptions.Emit until its context ends (it
// then returns driver.Stopped), the position is gone (driver.ErrExpired), the
// bucket or stream is gone (driver.ErrPermanent), Emit fails, or something
// else does. Values go through KVOptions.Codec with codec.Decode (a
// panicking codec is a *driver.DecodeError for that value).
//
// # Expiry and resume
//
// JetStream has no "compacted" error. When the stream's first retained
// sequence has passed from+1 (purge, MaxAge, limits), when from is past its
// last sequence, or when the stream's creation time differs from the one
// the last List read (the stream was deleted and created again), Watch
// returns an error matching driver.ErrExpired and the informer relists, which
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
// idle, and on a progress request, and expires if so. The consumer lives
// on the server and outlasts a dropped connection; the server moves it
// past messages removed meanwhile, so a skip in sequence (which a History
// limit or the key filter also cause) or a reconnect is all the watch sees
// of a purge. The check costs one stream-info request per such batch, plus
// one last-message lookup per held key older than the first retained
// sequence (remembered while the newer message is retained). Values
// removed with the connection up and nothing skipped (a purge below the
// watch's position) are noticed at the next such check. A consumer that
// fails (a consumer sequence gap, a server restart) is replaced from the
// last version emitted (see Clusters); a watch that cannot go on returns
// an ordinary error, the informer watches again from the last version it
// applied, and no relist happens as long as the stream still holds it.
//
// State parked between watches (core's contract): List leaves the key
// revisions (KV) or the folded state (event streams) at the version it
// returns, a watch at the last version it emitted, and Watch(from) takes
// it only when from is exactly that version. A KV watch opened from another
// version (not the end of its last List or watch) applies the first-sequence
// rule strictly, so with a small History it may relist: correct, only more
// expensive.
//
// # Bookmarks
//
// Both ListerWatchers implement driver.ProgressReporter. When a watch is
// idle (KVOptions.IdleCheck) or receives a request on
// WatchOptions.Progress, it reads the stream's last sequence and, if the
// leader then holds no message its filter matches after its position,
// sends a Bookmark there. WaitFor then returns for a revision written to
// another key or outside the filter. (A watched message past the head
// read counts too: it may have superseded one up to the head after the
// head was read, and the watch delivers it first.)
//
// Superseded messages: a watch whose consumer reaches a key's message only
// after a later write of the key removed it (a bucket's History, a
// stream's MaxMsgsPerSubject) skips it and delivers the later message at
// its own revision; it cannot tell which key a removed message was of. So
// a change it delivers does not prove that the revisions before it were
// delivered, and both ListerWatchers of such a stream implement
// driver.SupersededSkipper: the informer counts a revision applied only once
// a Bookmark (the head proof above) reaches it, not a change or a List
// (whose version a skipped key's later message may still be on its way
// to). WaitFor is then exact for busy keys too
// (TestKVReadYourWritesBusyKeys, TestEventStreamReadYourWritesBusyKeys);
// under writes to the watched keys it returns at the first head proof after
// its request, about one InformerOptions.ProgressRequestInterval later.
//
// # Consistency audit
//
// Both ListerWatchers implement driver.AuditLister (InformerOptions.Audit):
// a KV audit reads the last message of every key up to the stream's head,
// as List does, streaming each to the audit as it arrives; an event
// stream's audit folds the stream up to its head into a state of its own
// (one S per entity while it reads: a fold needs each entity's previous
// state), or, Stateless, streams each message. Neither parks anything for
// the watches. A bucket's MaxAge or a purge drops values without a message
// a watch delivers, so a KV answers driver.AuditRechecker too: before an
// audit reports or heals a key it read, it asks the stream's leader
// whether the key's last message is still the one read; a key dropped
// meanwhile is in flight, not missing (a heal would put it back).
//
// # Clusters
//
// Every version the adapter reports is one the data delivered with it
// covers, on R1 and replicated streams, whichever node the client is
// connected to and wherever its consumer is placed. A consumer reads the
// store of the node it is placed on, which may not have stored the newest
// messages yet, and a direct get may be answered by such a replica. So
// the head comes from STREAM.INFO, which the stream leader answers (an
// answer from a member while the stream has no leader is not used), and
// the proof that nothing the filter matches is pending up to it comes from
// STREAM.MSG.GET with next_by_subj, which only the stream leader answers
// (never a direct get). A List's version is that head once its consumer
// has delivered its initial set and the leader holds nothing watched
// between the last message delivered and the head (the List waits for a
// lagging consumer to catch up); a Bookmark is sent under the same proof.
//
// The server places each R1 consumer on a random replica of the stream.
// When a feed has many messages to deliver at once (an initial list, a
// watch far behind: 10,000 or more) and the server the client is
// connected to holds a current replica, the adapter creates the consumer
// again, a few times at most, until it runs there: otherwise every
// message crosses a route between servers first (measured in one process
// on a 3-node cluster: a 100k-key List took 0.62 s from a consumer on
// another node, 0.42 s from one on the connected node).
//
// What a cluster recovers from on its own is retried inside the adapter
// with a bound: a request that gets no responders, times out, or meets a
// stream without a leader (during an election, a step-down, a route
// hiccup) is repeated for up to 30 seconds, as long as the connection is
// up (see "A connection that is down" below); a consumer that is lost or
// stops delivering (its node restarted, missed heartbeats, no responders
// while it is placed, a leadership change) is replaced from the last
// version emitted, after the same checks as at the start of the watch, up
// to six times in a row without a delivered message. A List or replay
// whose consumer is lost starts that consumer again. What no retry can
// cure ends the watch with an error matching driver.ErrPermanent and naming
// the cause: the bucket or stream was deleted, the nats.Conn was closed,
// or an event stream's snapshot is older than the stream's first
// sequence.
//
// # A connection that is down
//
// While nats.go reconnects, requests are buffered and time out; the reason
// the server cannot be reached reaches only nats.go's callbacks. A request
// of a List or watch that fails while the connection is not connected is
// therefore not repeated: the List or watch returns at once with an error
// that says how the connection stands and the latest reasons (why it
// dropped, an authorization violation the server answered a reconnect
// with, and, when the connection was made with ReconnectErrors, why the
// latest reconnect attempt failed: connection refused, a TLS failure), so
// the informer reports it through its error handler and sync status and
// WaitForCacheSync's error names it. The error matches (errors.Is) the
// reasons, such as nats.ErrAuthorization. Likewise a request whose publish
// the server refuses (a permissions violation, sent asynchronously; the
// request itself just times out) ends the List or watch at once with the
// violation, which names the subject, and matches
// nats.ErrPermissionViolation. The informer backs off and tries
// again as soon as the connection is back (KV and EventStream are
// core.HealWaiters). A closed connection is a permanent failure whose
// error says why it closed (nats.go closes a connection the server
// refuses twice in a row for the same authorization reason, unless
// nats.IgnoreAuthErrorAbort is set). Credentials never appear: nats.go's
// errors name the server's host and port only.
//
// To learn the reasons, the adapter chains handlers in front of the
// connection's disconnect, reconnect and async error handlers (nats.Conn
// lets them be read and replaced) the first time a KV or EventStream is
// made on it; a handler set on the connection later
// (SetDisconnectErrHandler, SetReconnectHandler, SetErrorHandler) replaces
// that chain, so set yours before. The reconnect
// error handler cannot be read back from a nats.Conn: pass
// ReconnectErrors() to nats.Connect, after a nats.ReconnectErrHandler of
// your own, which it calls.
//
// # Setup
//
// A JetStream-enabled server or cluster, and a connection whose user may
// create ephemeral consumers on the stream and read stream info and
// messages ($JS.API.STREAM.INFO, CONSUMER.CREATE, CONSUMER.INFO,
// CONSUMER.DELETE, CONSUMER.MSG.NEXT, STREAM.MSG.GET). The bucket or stream
// must exist: NewKV and NewEventStream read it (I/O) and fail at start
// with an error naming it. TLS, credentials and reconnect policy are the
// caller's nats.Conn. Consumers are ephemeral, R1, in memory, with an
// inactivity threshold, so a process that dies leaves nothing behind for
// long.
//
// List holds the raw values of the listed keys until its fold is complete
// (a key written during the List must replace, not follow, its old value),
// then decodes and emits them in revision order and lets them go.
//
// Undecodable values (or reducer errors) arrive as events whose Err is a
// *driver.DecodeError naming the bucket or stream, the key and the sequence;
// the watch goes on.
package natsinformer
