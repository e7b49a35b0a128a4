// Package pginformer syncs PostgreSQL tables into dbinformer caches over
// logical replication (pgoutput), with github.com/jackc/pgx/v5 and
// github.com/jackc/pglogrepl. The directory is adapters/postgres; the
// package is named pginformer.
//
// A Source (NewSource) owns one replication slot, one walsender and one
// publication, however many tables it serves. Each table is a
// driver.ListerWatcher[T] (NewTable; register every table before the first
// List), typically run by its own informer; T is a struct mapped by column
// name (`db` tags, like pgx.RowToStructByName; `db:"-"` leaves a field out)
// or map[string]any. Keys are the primary key: the column's text for a
// single column, the columns' texts joined by '/' (with '\' and '/' escaped
// by '\') for a composite key. The resource version is the LSN at which a
// transaction's commit record ends; each transaction is one batch per
// table. Errors and logs write LSNs as Postgres does (0/28BD3A10).
//
// # Layers
//
// source.go holds the options and connections; slot.go the slot session
// (publication, slot creation with its exported snapshot, the snapshots
// tables list in, stream start and resume); stream.go the walsender loop
// and pgoutput decoding; wal.go the decoded-WAL types; tablestate.go the
// per-table buffers; catalog.go and check.go NewTable's catalog lookups and
// mapping proofs; rowmap.go row to struct mapping; plan.go the compiled
// scan plans that decode a column's bytes straight into T (List and stream
// alike); snapshot_read.go and snapshot_copy.go the List's snapshot readers
// and binary COPY; audit.go the audit's read (AuditList); progress.go
// Options.SyncProgress; toast.go the values
// kept for unchanged TOAST; table.go and watch.go the ListerWatcher, which
// only reads rows inside the snapshot the session hands it.
//
// # Handover from List to Watch
//
// The first List of a Source creates the slot with an exported snapshot;
// every List that starts while nothing else has been sent on the
// replication connection imports it on a connection of its own (REPEATABLE
// READ, SET TRANSACTION SNAPSHOT), and the stream starts from the slot's
// consistent point, which is the RV of those Lists, once every table has
// listed. A table listed later (a relist, an informer started late) reads
// inside the exported snapshot of a short-lived temporary helper slot and
// starts at that slot's consistent point; the main stream, which is never
// ahead of it, supplies the rest.
//
// # Reading a table
//
// A List reads COPY (SELECT ...) TO STDOUT (FORMAT binary) and decodes each
// column straight into T: binary where pgx decodes the binary and the text
// form to the same Go value (integers, floats, bool, text types, json,
// jsonb, uuid, bytea, date and timestamps into their natural Go types),
// otherwise the server sends the type's output text (format('%s', c)), the
// form pgoutput streams. Lists of different tables read side by side, and a
// table of more than 16 MB is split into ranges of blocks (ctid ranges;
// Postgres 14 or later; up to four ranges per reader) that several
// connections read at once, all inside the same snapshot.
// Options.SnapshotReaders bounds these connections for the whole Source
// (default min(4, GOMAXPROCS)); a List takes up a connection another List
// gives back while it reads. So the Lists of a Source's tables run side by
// side and take the time the readers need for all their rows: no more
// than the largest table's alone while readers or cores are idle, but on
// a machine the largest table alone keeps busy, their total work (on 2
// cores three tables of 1M, 500k and 250k rows took 1.8-2.0x the largest
// alone, and raw COPY of them 1.6-1.8x: BENCHMARKS.md). Options.SyncProgress is
// told, about once a second per List, the rows read, the planner's estimate
// (pg_class.reltuples), the rate and the time left; metrics/prometheus
// exports the same per informer.
//
// # Acknowledgement
//
// The position confirmed to the server (write, flush and apply alike) is
// what every table's consumer has applied: a batch counts as applied when
// the watch's Emit returns. With no change pending the position follows
// the server's keepalives, so WAL of unpublished tables or an idle database
// does not pile up, and watches emit Bookmarks at it (read-your-writes with
// WaitFor(CommitToken(...)) works for writes to other tables too). A
// progress request (driver.ProgressReporter) asks the server for a keepalive.
//
// # A silent connection
//
// The stream asks the server for a keepalive after one StatusInterval in
// which it received nothing; a live server answers at once. A stream that
// then still hears nothing (a frozen server, a half-open connection) ends
// its session with an error that says so, and the next Watch reconnects:
// after 3 StatusIntervals, but never before half the server's
// wal_sender_timeout plus two intervals (a walsender busy decoding a large
// transaction to other tables reads our requests only that often). Table
// implements driver.ProgressIntervaler with a third of that limit, so an
// informer's stuck-watch detection agrees with the stream's.
//
// # A busy stream
//
// While changes arrive fast (a backlog after a restart, a bulk write), the
// replication socket's receive low-water mark (SO_RCVLOWAT, TCP only) is
// raised to about 5 ms of the arrival rate, 16 to 64 KiB, so that the
// walsender does not have to wake this process for every message: that
// costs the server CPU and slowed a backlog's drain by a fifth or more. A
// change arriving alone is read at once; while reads are batched, a receive
// waits at most 5 ms for more.
//
// # State parked between watches
//
// Per table the Source keeps the keys and the TOAST values described
// below as of the last decoded transaction, and the decoded events of the
// last Options.History changes. A Watch from any version within that
// history replays exactly what was delivered; an older one is
// driver.ErrExpired, and the informer relists.
//
// # What a table must be
//
// A primary key (the cache keys), under REPLICA IDENTITY DEFAULT or FULL
// alike: a table without one is refused, also under FULL (a whole row as
// the key would make two equal rows one object). Under DEFAULT, deletes
// carry only the key (the informer fills in its cached object); under FULL
// they carry the old row.
//
// NewTable proves each field mapping from the catalog: a field must hold
// NULL when its column is nullable (use a pointer or a pgtype type), and
// every value of the column's type and width: it decodes extreme values
// that the server renders for the column (int2's 32767 into an int8 field
// fails, as do money into float64, pg_lsn into uint64, '{NULL}' into
// []string, an inet with a netmask into netip.Addr). string holds any
// type's text. A row that still fails at run time (a type changed under
// the informer, an empty primary key) fails the List or the watch with
// driver.ErrPermanent, naming how many rows failed and the first reasons;
// TableOptions.SkipUndecodable leaves such rows out instead, each reported
// as a *driver.DecodeError and counted by Table.Skipped.
//
// Partitioned tables are synced through their root: the publication a
// Source creates has publish_via_partition_root = true, so the partitions'
// changes arrive under the root's name; a row moving between partitions is
// a delete of the old key and an add of the new one. A user publication
// without that option is refused by NewTable with the ALTER PUBLICATION
// that fixes it. A single partition can be synced on its own, unless its
// publication publishes it through its root.
//
// Generated columns are not streamed by pgoutput before Postgres 18: they
// are left out of List too (a map has no entry for them), and a struct
// field mapped to one is refused; tag it `db:"-"`. TableOptions.Omit leaves
// out other columns the same way.
//
// Only the columns a Table decodes are read by List (the mapped columns
// and the key). The stream carries every column by default, and the
// others are only stepped over: never decoded, and never kept (TOAST
// memory copies what it keeps of such a row). Options.PublishColumnList
// gives the publication the Source creates (Postgres 15+, temporary slot)
// a column list, the union of the columns of every struct Table of the
// table (the key among them), so that the server does not send the
// others; it is opt-in because while it is in place Postgres refuses the
// application's ordinary migrations and writes that conflict with it:
// DROP COLUMN of a listed column (CASCADE takes the table out of the
// publication), ALTER COLUMN ... TYPE of a listed column, and, after
// ALTER TABLE ... REPLICA IDENTITY FULL, the table's UPDATEs and DELETEs
// ("column list used by the publication does not cover the replica
// identity"). What the default costs was measured (bench's
// BenchmarkPostgresColumns, two runs on Postgres 15 and a 2-core machine
// shared with other work; BENCHMARKS.md, "Streaming every column"): on a
// 1M-row table where T maps the key and two small columns and leaves a
// 200-byte text and a ~110-byte jsonb unmapped (none TOASTed), an update
// streamed 5.8x the bytes (385 against 66), a backlog of them cost the
// walsender 1.36-1.46x the CPU and this process 1.17-1.34x, and one
// unpaced writer's updates were applied at 0.55-0.62x the rate. The
// initial sync reads only the mapped columns either way, and an unchanged
// TOASTed value is not sent with or without the list. A map[string]any
// Table, a table with REPLICA IDENTITY FULL and a permanent slot's
// publication never get a column list. A
// publication the Source did not create, or an existing one it reuses,
// must send every column a Table decodes: NewTable (and the first List)
// refuse a column list that leaves one out, naming it.
//
// What the table's schema changes do is in "Schema changes" below.
//
// # Schema changes
//
// NewTable proves the mapping of T onto the table's columns as they are.
// While the table is synced the Source checks it against what was proven
// twice over: every Relation message of the stream (pgoutput sends one
// before the first change after the table's schema changed), and, every
// 2 seconds and at once when a watch asks for progress, the catalog (a
// dropped table, or one out of the publication, sends nothing at all; a
// rewrite streams no rows). A watch's Bookmark never passes the WAL
// position the catalog check last vouched for, so WaitFor(v) never
// succeeds for a version at which the table had stopped being streamed
// unnoticed. What each migration does, with the default
// TableOptions.OnSchemaChange:
//
//   - ADD COLUMN, DROP COLUMN of a column T does not map, VACUUM FULL,
//     CLUSTER, CREATE INDEX (CONCURRENTLY), ALTER TABLE ... RENAME TO,
//     REPLICA IDENTITY FULL, SET NOT NULL: nothing to do; the
//     cache stays equal to the table.
//   - ALTER COLUMN ... TYPE of a mapped column (with or without USING,
//     which rewrites every value without streaming a row), and DROP NOT
//     NULL of one: the mapping is proven again against the new column. If
//     T still holds every value, the table's watch ends with a
//     *SchemaChangeError matching driver.ErrExpired and the informer lists
//     the table again (handlers see only the real differences); if not,
//     it ends with one matching driver.ErrPermanent naming the column and
//     the Go type that would hold it. (A DROP NOT NULL is found by the
//     catalog check; changes streamed meanwhile decode, so the informer
//     may apply them first.)
//   - DROP COLUMN or RENAME COLUMN of a mapped column: the watch ends with
//     a *SchemaChangeError matching driver.ErrPermanent, before the first
//     change streamed without the column; renaming it back later does not
//     bring back what was streamed meanwhile.
//   - DROP TABLE (and a table created again under the name: a new
//     relation), ALTER PUBLICATION ... DROP TABLE, or a DROP ... CASCADE
//     that takes the table out of the publication: the watch ends with a
//     *SchemaChangeError matching driver.ErrPermanent within seconds; the
//     informer never reports a version after the last it had verified.
//   - TRUNCATE: the informer lists again (see TRUNCATE below).
//   - For a map[string]any Table, any change of the table's columns
//     (added, dropped, renamed, retyped) relists it.
//
// TableOptions.OnSchemaChange decides between relisting and stopping for
// the changes T still holds (FailOnSchemaChange stops at every one).
// Table.LastSchemaChange and Table.SchemaChanges tell what happened, and
// the Source logs each change at warning level. A change that reaches the
// informer (a relist or a stop) is also in its SyncStatus.SchemaChanges
// (driver.SchemaChange), on the status page and in
// dbinformer_informer_schema_changes_total{action} (metrics/prometheus). A warm start checks the
// shape too: a checkpoint carries the table's relation id and its decoded
// columns' names, types and type modifiers (Table.Codec), and one of
// another shape is not restored; the informer lists instead.
//
// # Unchanged TOAST
//
// Unchanged TOASTed values arrive as "unchanged" in updates. A core
// informer fills them in from the object it caches for the key, its
// previous state (driver.Event.Fill, fillin.go): a Table whose watches are
// all consumed by informers (driver.WatchOptions.Fills) keeps no copy of
// them. An update that moves a row to a new primary key beside such a
// value ends the watch for a List (the cache holds the old key's object,
// not the new one's). For a consumer that does not fill (a relay, a
// filter.Events wrapper), and until the first filling watch starts, the
// Source keeps, per key, the values T uses that can be stored out of line
// as of the last applied change, and fills them in; a watch without Fills
// that meets an update it cannot fill ends with driver.ErrExpired, and the
// List it runs then makes the table keep them again. Only a value longer than a
// TOAST pointer (more than 20 bytes of data) is ever stored out of line,
// and never one of a fixed-length type or a STORAGE PLAIN column: List
// keeps a value only if the server says it may be out of line
// (pg_column_toast_chunk_id on Postgres 17; on 14-16, for text, varchar,
// char and bytea, a value whose pg_column_size is at most its octet_length,
// that is a compressed one or one without an inline header; else
// pg_column_size over 20 bytes; the answers for a row's columns come as
// the bits of one extra int8 field), the stream keeps text longer than 20 bytes and every
// value of other variable-length types. A kept value that T holds as a
// string, or as a byte slice with the same bytes (json.RawMessage), shares
// T's memory. REPLICA IDENTITY FULL tables fill in from the old row instead
// and keep nothing.
//
// # TRUNCATE
//
// A TRUNCATE of a synced table ends its watches with driver.ErrExpired after
// the changes before it, and the informer lists the table again: handlers
// get deletes for the keys that are gone (and adds for rows the truncating
// transaction wrote), as after any relist. Keeping every key in memory to
// delete them from the stream would cost a set of every key and a map
// write on every change. Postgres sends nothing for a TRUNCATE of one
// partition of a table published through its root
// (publish_via_partition_root): truncate the partitioned table, or delete
// the rows, so that the informer hears of it.
//
// # Partial sync
//
// TableOptions.Where (package filter) caches only the rows a filter
// matches. The conditions Postgres evaluates exactly as Go does (Eq, In
// and ranges on integer columns, Eq and In on boolean columns, Eq, In and
// Prefix on text and varchar columns, at the top level of the filter) go
// into the WHERE of the List's snapshot query, on a table with REPLICA
// IDENTITY FULL or whose mapped columns are all fixed-length (otherwise an
// update that brings a row into the filter could leave an unchanged
// TOASTed value out of the stream with nothing to fill it from). The rest
// of the filter, and the whole filter on the stream, is evaluated on each
// decoded row. With Options.PublishRowFilter (opt-in: a row filter makes
// Postgres refuse ALTER COLUMN ... TYPE and DROP COLUMN of the columns it
// names, and the table's UPDATEs and DELETEs once its replica identity no
// longer covers them), on Postgres 15 and later the publication the Source
// creates also gets a row filter with those conditions that are on replica
// identity columns (any column under FULL, the primary key otherwise:
// Postgres evaluates row filters on UPDATE and DELETE only over those), so
// that changes of rows that neither matched nor match are not sent at all
// (Table.StreamedChanges counts what is); with several filtered Tables of
// one table it is the union of theirs. A permanent slot's publication,
// which outlives the process, gets no row filter. A row that starts
// matching reaches handlers as an add, one that stops as a delete carrying
// its last matching state. Several Tables of one table on one Source, each
// with its own filter, share the slot. A condition marked filter.Server
// that cannot go into the query is refused by NewTable, naming REPLICA
// IDENTITY FULL when that is what stands in the way; so is one the
// publication would have to evaluate but cannot: before Postgres 15 (no
// row filters), on a permanent slot, or with a publication the Source did
// not create, or without Options.PublishRowFilter.
//
// # Protocol
//
// pgoutput proto_version 1: transactions are applied whole, so streaming
// of in-progress transactions (v2+) would only add messages to buffer.
// Values travel as text on both paths, decoded by the same pgtype.Map, so
// a row read by List and the same row from the stream are equal Go values.
// Both connections set TimeZone=UTC, DateStyle=ISO and extra_float_digits=3,
// and an application_name (Options.ApplicationName; by default the
// program's name and the slot's) that pg_stat_replication shows. Short
// catalog queries (NewSource's checks, NewTable's lookups, Head, a
// session's publication and slot lookups) share one connection, kept idle
// for two seconds after the last of them (conncache.go): each connection
// is a server process and an authentication.
//
// # Server settings and privileges
//
//	-- postgresql.conf (restart needed)
//	wal_level = logical
//	max_replication_slots = 10   -- one per Source, plus one briefly per late List
//	max_wal_senders = 10
//	max_slot_wal_keep_size = 10GB  -- with Options.PermanentSlot: cap WAL kept for an absent consumer
//
//	CREATE ROLE app_sync LOGIN REPLICATION PASSWORD '...';
//	GRANT SELECT ON public.users, public.orders TO app_sync;
//	-- either let the Source create its publication (the role must own the tables),
//	-- or create it once and set Options.Publication:
//	CREATE PUBLICATION app_pub FOR TABLE public.users, public.orders WITH (publish_via_partition_root = true);
//
// pg_hba.conf must let the role connect to the database, as for any client
// (host app app_sync 10.0.0.0/8 scram-sha-256): a logical replication
// connection names its database and matches ordinary database lines; the
// "replication" keyword is for physical replication and does nothing here.
//
// Options.Publication must exist (NewSource says "publication ... does not
// exist" otherwise) unless Options.CreatePublication asks the Source to
// create it. NewTable checks that it carries the table and names the
// ALTER PUBLICATION that adds it.
//
// # Warm restarts
//
// With core.CheckpointOptions and Options.PermanentSlot, a Table restarts
// warm (restore.go): the informer hands it the checkpoint's keys
// (driver.Restorer), the table watches from the checkpoint's version and no
// row is read; while checkpoints are on, the slot's confirmed position
// never passes the last durable checkpoint (driver.DurableAcknowledger), so
// the server keeps every change the next start needs. Every table with a
// primary key restarts warm, under REPLICA IDENTITY DEFAULT as under FULL
// and whatever its columns: an unchanged TOAST value in a later update is
// filled in from the informer's cached object, the checkpoint's (see
// Unchanged TOAST), so a warm restart costs the server nothing beyond the
// permanent slot (no REPLICA IDENTITY FULL, whose UPDATEs and DELETEs
// write the whole old row into WAL). Only a Table with a filter, which
// must see whole rows, still relists under DEFAULT when it has a
// variable-length column beside its key. A start whose slot was lost or
// is past the checkpoint relists too; the informer then tells handlers
// only what changed.
//
// # Slots
//
// Temporary slots (the default) disappear with the replication connection;
// a broken stream (server restart, terminated walsender) then means a relist
// of every table. Options.PermanentSlot keeps the slot (name it with
// Options.Slot), so a broken stream resumes from the confirmed position
// without a relist; at start an existing slot is checked in
// pg_replication_slots, and one whose WAL is lost (wal_status 'lost') or
// that was dropped is recreated and every table relists. A restart of this
// process still lists every table again (the caches live in memory). A
// permanent slot holds WAL while its consumer is away: set
// max_slot_wal_keep_size, and drop the slot (SELECT
// pg_drop_replication_slot('name')) when the application is retired. Its
// publication is kept by Close.
//
// # Audit
//
// Table implements driver.AuditLister, so an informer's consistency audit
// (core.InformerOptions.Audit) compares its cache with the table at one
// LSN: AuditList creates a temporary slot of its own (dbinformer_audit_…)
// with an exported snapshot, reads the table inside it as a late List
// does (the same columns, decoding, keys and partial-sync filter, so that
// partitioned tables, generated and omitted columns and TableOptions.Where
// count as in the cache) and returns the slot's consistent point, which is
// after every commit the informer can have seen. It reads through one COPY
// on a connection outside Options.SnapshotReaders, paced by the audit (a
// blocked Emit blocks the server's send, nothing is buffered beyond the
// socket), changes nothing the stream or the watches use, and drops the
// slot before it returns. While it reads it holds a replication slot, a
// walsender and a snapshot (vacuum keeps the rows deleted meanwhile): a
// 1M-row table at the default pace of 10,000 rows/s holds them for about
// 100 s, and a statement_timeout of the role shorter than that ends the
// read (the run fails and says so: raise the pace or the timeout). A
// reader connection lost mid-read ends the run with an error matching
// driver.ErrExpired; the audit tries again next period. An audit beside a
// List of the same rows, and AuditList alone, are measured by
//
//	go test ./bench -run '^$' -bench 'BenchmarkPostgresAudit' -benchtime 1x
//
// # Memory
//
// Besides the informers' caches (the objects themselves), a Source keeps
// per table: every key, and for DEFAULT-identity tables whose consumer does
// not fill from its cache the values that can come back as unchanged TOAST
// (above; text held by T as a string is shared, not copied); the transactions no consumer has acknowledged yet (a transaction
// is held whole: a 100k-row transaction is 100k rows in memory once); and
// the decoded events of the last Options.History changes. A table whose
// informer is stopped for good holds its unacknowledged transactions and
// the slot's WAL: Close the Source when its informers stop. After Close,
// List and Watch return ErrClosed.
//
// # WAL during a long initial sync
//
// The slot holds WAL from its consistent point until the stream starts
// (after the last table's first List) and its consumers confirm: a sync of
// d seconds under a write load of r bytes of WAL per second retains about
// r*d. Parallel snapshot readers shorten d and with it the WAL retained.
// Nothing else holds the slot back: it confirms the server's keepalive
// positions when no change is pending. Measured by
//
//	go test ./bench -run '^$' -bench 'BenchmarkPostgresSyncWAL' -benchtime 1x
//
// (1M rows under 2,000 rows/s of 200-byte inserts; the WAL retained when
// WaitForCacheSync returns, one reader against the default).
package pginformer
