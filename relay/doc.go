// Package relay re-serves one source over a NATS JetStream stream: one
// Relay process reads the source (a Postgres table, an etcd prefix, a
// Kubernetes resource: any driver.ListerWatcher) and publishes every change;
// any number of informers on any machine read the stream through a
// Downstream, whose resource version is the source's own version. So N
// replicas cost the database one replication slot and one walsender, not
// N, and WaitFor(ctx, lsn) after a write to Postgres means the same thing in
// a replica on another machine as next to the slot: the version is a
// portable consistency token.
//
// # Leadership and fencing
//
// Run several relays; a leader.Elector (etcd, Postgres advisory lock or a
// Kubernetes Lease) picks the one that reads the source. Every publish
// says where the stream must end for it to be stored (see Pipelining), so
// that while two relays believe they lead (a deposed leader has not
// noticed yet) at most one of them can write: the other's publish fails,
// it reads the stream again and, finding a message of a later term (the
// epoch in its Dbi header, the leader.Term's epoch), stops until its election
// notices. Each term starts with one message of its own; once it is stored,
// the deposed leader can publish nothing more, and a source that another
// process may still hold (a Postgres permanent slot whose walsender a
// frozen leader keeps: pginformer.Source.TakeOverSlot) is taken over from
// it at once rather than after the server's wal_sender_timeout. Elections
// depose a frozen leader within their lease (leader.DefaultLease).
//
// A new leader reads the stream back (one pass: the stream keeps one
// message per key) and resumes the source's watch from the last version
// the stream holds completely: no gap and no duplicate. A source that
// parks state between watches (driver.Restorer: a Postgres table over a
// permanent slot) is first handed the stream's keys at that version, so
// that a process that never listed it resumes from its slot — no relist,
// no temporary slot (a late write of a deposed term is repaired from the
// slot in the same way: see Pipelining). Only where the source no longer
// holds the changes (the slot was dropped or moved past the version) does
// the new leader relist, and it logs why. A group of changes
// that a dead leader left half-published is closed with an abort message
// (downstreams drop what they hold of it) and its keys are published again
// from a relist of the source, even where the source still equals what
// the aborted group said (also when the term that aborted it died before
// its relist was stored: the next term republishes the keys of every
// aborted group whose messages the stream still holds). A source watch that expires (etcd
// compaction, a lost slot) is a relist too, published as a diff against
// the stream (changed keys put, vanished keys deleted) at the list's
// version, so downstream caches converge without reloading. A relist's
// changes happened at versions up to the list's, not at it: a Downstream
// delivers them at the version right after the last one it delivered,
// followed by a Bookmark at the list's version, so that WaitFor of a
// version before the list's cannot return before they are applied. A
// list at the version the stream already ends at (an etcd prefix nobody
// wrote to since) is published at the source's next version instead,
// with the changes up to it: a group at a version a downstream confirmed
// would look delivered to it.
//
// # Pipelining
//
// The relay does not wait for one source transaction's messages to be
// acknowledged before it publishes the next: up to Options.MaxInFlight
// messages (DefaultMaxInFlight) are in flight, published in source order
// on one connection, and one goroutine awaits their acknowledgements in
// the same order. Each expects the stream's last sequence to be the one
// before its own (Nats-Expected-Last-Sequence), which the stream's leader
// checks before replicating it. A position alone does not chain them: a
// message another relay slipped in takes the sequence one of ours
// expected, and the next of ours, expecting the stream to end at that
// very sequence, is stored behind it. Both sides of that are caught: the
// relay whose message failed sees a later one acknowledged (a broken
// chain), and a term that finds an earlier term's message stored after a
// later one's (a late write) mends what it cost. A broken chain, and late
// writes behind messages of the term that finds them (a deposed leader,
// thawed, sends its queued publishes, and one finds the stream at the
// length it expected, however many the new term had published), cost
// only changes the term itself sent after the last version it
// acknowledged the source at: its next attempt repairs the stream from
// the source from that version (below), with no relist. Where the message it cost
// provably carried no change (the later term's first message took the
// sequence of the earlier term's progress message: the earlier term's
// next message starts a group with the same last complete group),
// the term resumes from the stream. Where it may have carried one, and
// the late writes follow that first message alone, no relay
// acknowledged the source past its version (a pipeline acknowledges in
// order and nothing after its first failure), so the term repairs from
// the source instead of relisting: it watches the source from that
// version (a Postgres permanent slot still holds the changes), collapses
// the changes up to the first version past the stream's last into one
// group with each key's last change, and publishes it as a relist's group
// is (see below): every downstream, also one that read the late writes
// and confirmed their version without the lost change, gets every key
// the late writes and the lost change touched again, and a Watch from the
// late writes' version (a checkpoint taken after them) finds the group,
// which is past it. Any other shape of late writes, or a source that no
// longer holds those changes (driver.ErrExpired), relists instead,
// republishing the late writes' keys so that the next term does not find
// them again, and logs why. A relist republishes whatever the stream
// lacks. A term's first message is on a subject of its own,
// <prefix>.term, so that a deposed term's late progress cannot take its
// place (the stream keeps one message per subject) and hide the late
// writes behind it. The term's first message supersedes the later term's
// first message that showed the late write, so it records what the term mends
// (a header, Dbi-Pending: the repair's version, or a relist): a term
// that finds that record with nothing of its term after it (only, maybe,
// more late writes, which it mends with it), the term having ended
// before its repair or relist was stored, carries on with the same
// repair, or relists, in whichever process it runs, and records it in
// its own first message in turn.
// (Chaining by message id, Nats-Expected-Last-Msg-Id, is not an option:
// a replicated stream checks it only when its replicas apply the message,
// and nats-server 2.15 then stops the stream on every replica.) Each
// acknowledgement must name the sequence computed for it; a duplicate
// acknowledgement is an error, but for a copy (below).
//
// A message without an acknowledgement after a second (lost with a
// stream leader that went down, or published while the stream elected
// another, whose replicas drop it), or with an error that says nothing of
// the stream (no responders, a lost connection), is published again,
// unchanged, until the acknowledgement timeout: its Nats-Msg-Id makes a
// copy of a stored message a duplicate answered with the sequence it was
// stored at, and its expected last sequence stores a copy only where the
// message belongs, or refuses it for good. The messages in flight behind
// a lost one are published again at once. A stream leader's election
// thus costs the relay the election, not a restart of its term.
//
// The source is acknowledged only up to what JetStream has stored: a
// source that acknowledges positions to its server (the Postgres slot:
// driver.DurableAcknowledger) is gated by New and told each source version
// once the last message of it, and so every message before, is
// acknowledged; Emit's return no longer vouches for it. The first failure
// ends the term: the source watch is cancelled, what is still in flight
// is awaited (up to the acknowledgement timeout) so that nothing more of
// the term lands afterwards, and the next term reads the stream and
// resumes from the last version it holds completely, as after a crash. A
// window holds at most MaxInFlight changes, so a Postgres source resumes
// from its in-memory History (pginformer.Options.History, 10000 changes by
// default) rather than relisting, when the window is smaller. The relay
// publishes through a JetStream context of its own on the connection of
// the one given to New, with a bound on pending asynchronous publishes
// that fits the window and its copies, and a timeout on them (an
// acknowledgement lost with a stream leader is otherwise pending for
// good).
//
// # The stream
//
// Create it with StreamConfig (Replicas 3 on a cluster): subjects
// <prefix>.>, limits retention, one message per subject, no age or size
// limit, a duplicate window. New and NewDownstream refuse a stream that
// does not exist, has another retention, other subjects or limits that
// could remove a key's only message, and say how to fix it. Messages:
//
//	<prefix>.k.<key>                  a change: op put|del|err, data = Codec bytes
//	<prefix>.s.<shards>.<shard>.<key> the same, with Options.Shards (see Shards)
//	<prefix>.progress                 the source's head: nothing changed up to it
//	<prefix>.term                     a term's first message: progress, kept apart (see Pipelining)
//	<prefix>.abort.<version>          drop the unfinished group at version
//
// Keys are encoded into one subject token (KeySubject, ShardKeySubject). Every message
// carries one Dbi header: the source version, the version of the group of
// changes before it and the epoch, then, on a key message, its op, its
// position in and the size of the source transaction's group, and the
// flags commit (the group's last) and relist; key messages also carry a
// Nats-Msg-Id (version, position, key, term), so that a repeated
// publish is stored once. A transaction that changes one key twice is
// published as its last change of that key. A term's first progress
// message may also carry Dbi-Pending (the repair or relist the term
// starts with, see Pipelining), which downstreams ignore.
//
// # Downstreams
//
// A Downstream lists the stream in one pass (then reads on to the head, so
// that a key rewritten meanwhile is not missed) at the version of the last
// complete group, and watches from there, one batch per source transaction.
// It keeps no copy of the keys' states beside the informer's cache (its
// event stream is natsinformer's Stateless mode): a watch holds only the
// group it is assembling, and a Watch from a version starts at the stream
// sequence of that version without replaying the stream before it. Puts
// reach the informer as Added events; the informer tells adds from updates
// by its cache.
// Watch(v) for a v it did not just return searches the stream for v. A
// watch that finds a group incomplete or missing (a later change of a key
// removed its message before the watch read it: it fell behind a busy
// key) catches up instead of expiring: it reads on, keeping each key's
// last change, and notes for each such hole the stream's last sequence as
// read after it (every message that removed one it missed is at or before
// it). At the end of every batch it delivers the changes it kept, as a
// relist's group is delivered, and a Bookmark at the last version
// complete before the oldest hole whose messages it has not read up to:
// a target fixed per hole, so that under writes that never pause the
// informer keeps applying and its version trails the stream by about as
// far as the watch is behind, not by as long as the writes last. A cache
// may then hold a key's change newer than its version (never an older
// one). It reads what a relist would read after the gap, without reading
// the whole stream or having the informer compare its whole cache. A position the stream no
// longer holds at all (a Watch from a version whose messages are gone,
// the stream purged) is driver.ErrExpired: the informer relists from the
// stream, never from the source. WaitFor of a source version that touched no
// relayed key returns once the relay has published the source's head
// (Options.ProgressInterval). The relay and every Downstream must use the
// same Codec.
//
// Deleted keys stay in the stream as one small message each (a tombstone),
// so that a downstream that lists later still learns of the delete.
//
// # Shards
//
// With Options.Shards a relay publishes each key's changes on a subject
// that carries its shard (the hash package shard assigns keys with, over
// the same count), and a Downstream that owns some shards
// (DownstreamOptions.Shards and Owned, or FilterShards, which a
// shard.Source calls with its owned set before each List and Watch)
// consumes only their subjects, with one JetStream consumer filtering on
// all of them: JetStream does the filtering, so a replica's network and
// decode work shrink with the number of replicas, as its cache does. One
// slot, one reader, N partial caches. At a handoff the informer relists
// through the new set (enter and leave events) and the watch after it
// opens its consumer with the new filters.
//
// The group metadata chains every message of the stream, and a Downstream
// that reads some shards does not see the chain: it confirms a version C
// only on proof, read from the stream leader, that every key of its shards
// has its last message at or before a stream position it read up to and
// that the stream there is complete up to C (the event stream's Bookmark
// at its head, no message of its shards after it, the message there says
// C). Until then it holds what it read and asks for the next bookmark;
// then it delivers every change at the first version after the last it
// confirmed (a message read may stand for changes of its key superseded
// before it was read, at any version since), and a Bookmark at C. So
// WaitFor never returns over a change of its shards it did not deliver,
// however many messages were superseded before it read them, and it never
// mistakes other shards' messages for missing ones. The price is that a
// confirmation needs the owned shards quiet for one round of reads (one
// per owned shard, concurrently); under writes to them that never pause
// for that long, WaitFor and the delivery of new changes wait.
//
// A stream holds one layout: a relay that finds keys published with
// another Options.Shards (or none) in its stream refuses to lead, and
// says how to move (stop the relays, purge the stream, start them with the
// new setting: the first leader relists the source into it; downstreams
// relist from the stream). A Downstream asked for shards over a stream
// without them reads every key, as before, and its shard.Source filters at
// decode; over a stream with another count it refuses, naming the fix.
//
// # Status and metrics
//
// A Relay reports where it stands through RelayStatus (core.RelayStatus:
// leader or follower, its term, the messages it published, the source
// version JetStream stored, relists, repairs (the stream mended from the
// source without a relist: see Pipelining) and failed terms with the last
// reason, and, read when asked, the stream's last message and the
// source's head, whose difference is the lag). The status page and
// Prometheus read it as they read an informer: statuspage.Page.AddRelay(r)
// and prommetrics.Provider.TrackRelay(r), under Options.Name (the stream's
// name by default). A Downstream's informer reports through
// core.InformerMetrics like any informer.
//
// # Audit
//
// A Downstream is a driver.AuditLister: an informer over it with
// core.InformerOptions.Audit compares its cache with the stream, its
// source, as of one source version (AuditList reads the stream once,
// streaming, as List would, up to a version the relay completed). Keys a
// catch-up delivered ahead of their version are compared with what the
// watch delivered, not taken for divergences. Whether the stream holds
// the database is the relay's part: it publishes a relist as a diff
// against the stream whenever its source watch expires.
package relay
