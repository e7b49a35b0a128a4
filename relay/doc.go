// Package relay re-serves one source over a NATS JetStream stream: one
// Relay process reads the source (a Postgres table, an etcd prefix, a
// Kubernetes resource: any core.ListerWatcher) and publishes every change;
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
// carries Nats-Expected-Last-Sequence, the stream's last sequence as the
// relay knows it, so that while two relays believe they lead (a deposed
// leader has not noticed yet) at most one of them can write: the other's
// publish fails, it reads the stream again and, finding a message of a later
// term (the Dbi-Epoch header, the leader.Term's epoch), stops until its
// election notices. Each term starts with one message of its own.
//
// A new leader reads the stream back (one pass: the stream keeps one
// message per key) and resumes the source's watch from the last version
// the stream holds completely: no gap and no duplicate. A group of changes
// that a dead leader left half-published is closed with an abort message
// (downstreams drop what they hold of it) and its keys are published again
// from a relist of the source. A source watch that expires (etcd
// compaction, a lost slot) is a relist too, published as a diff against
// the stream (changed keys put, vanished keys deleted) at the list's
// version, so downstream caches converge without reloading. A relist's
// changes happened at versions up to the list's, not at it: a Downstream
// delivers them at the version right after the last one it delivered,
// followed by a Bookmark at the list's version, so that WaitFor of a
// version before the list's cannot return before they are applied. The relay
// acknowledges a source batch (its Emit returns, which for Postgres lets
// the slot advance) only after JetStream acknowledged every message of it.
//
// # The stream
//
// Create it with StreamConfig (Replicas 3 on a cluster): subjects
// <prefix>.>, limits retention, one message per subject, no age or size
// limit, a duplicate window. New and NewDownstream refuse a stream that
// does not exist, has another retention, other subjects or limits that
// could remove a key's only message, and say how to fix it. Messages:
//
//	<prefix>.k.<key>         a change: Dbi-Op put|del|err, data = Codec bytes
//	<prefix>.progress        the source's head: nothing changed up to it
//	<prefix>.abort.<version> drop the unfinished group at version
//
// Keys are encoded into one subject token (KeySubject). Every message
// carries Dbi-Version (source version), Dbi-Prev (the version of the
// group of changes before it) and Dbi-Epoch; key messages carry Dbi-Index
// and Dbi-Count (position in and size of the source transaction's group)
// and Nats-Msg-Id (version, position, key, term), so that a repeated
// publish is stored once. A transaction that changes one key twice is
// published as its last change of that key.
//
// # Downstreams
//
// A Downstream lists the stream in one pass (then reads on to the head, so
// that a key rewritten meanwhile is not missed) at the version of the last
// complete group, and watches from there, one batch per source transaction.
// Watch(v) for a v it did not just return searches the stream for v. A
// watch that finds a group incomplete or missing (a later change of a key
// removed its message before the watch read it: it fell behind a busy
// key) returns core.ErrExpired and the informer relists from the stream,
// never from the source. WaitFor of a source version that touched no
// relayed key returns once the relay has published the source's head
// (Options.ProgressInterval). The relay and every Downstream must use the
// same Codec.
//
// Deleted keys stay in the stream as one small message each (a tombstone),
// so that a downstream that lists later still learns of the delete.
package relay
