// Package postgres syncs PostgreSQL tables into dbinformer caches over
// logical replication (pgoutput), with github.com/jackc/pgx/v5 and
// github.com/jackc/pglogrepl.
//
// A Source owns one replication slot, one walsender and one publication,
// however many tables it serves. Each table is a core.ListerWatcher[T]
// (NewTable; register every table before the first List), typically run by
// its own informer; T is a struct mapped by
// column name (`db` tags, like pgx.RowToStructByName) or map[string]any.
// Keys are the primary key: the column's text for a single column, the
// columns' texts joined by '/' (with '\' and '/' escaped by '\') for a
// composite key. The resource version is the LSN at which a transaction's
// commit record ends; each transaction is one batch per table.
//
// # Handover from List to Watch
//
// The first List of a Source creates the slot with an exported snapshot,
// imports it on a normal connection (REPEATABLE READ, SET TRANSACTION
// SNAPSHOT) before anything else is sent on the replication connection,
// reads every table that lists while it is open, and streams from the slot's
// consistent point, which is the RV of those Lists. A table listed later
// (a relist, an informer started late) reads inside the exported snapshot of
// a short-lived temporary helper slot and starts at that slot's consistent
// point; the main stream, which is never ahead of it, supplies the rest.
//
// # Acknowledgement
//
// The position confirmed to the server (write, flush and apply alike) is
// what every table's consumer has applied: a batch counts as applied when
// the consumer calls Next again. With no change pending the position
// follows the server's keepalives, so WAL of unpublished tables or an idle
// database does not pile up, and watchers receive Bookmarks at it
// (read-your-writes with WaitFor(pg_current_wal_lsn()) works for writes to
// other tables too).
//
// # Replica identity and TOAST
//
// Tables need a primary key and REPLICA IDENTITY DEFAULT or FULL. Under
// DEFAULT, deletes carry only the key (the informer fills in its cached
// object); under FULL they carry the old row. Unchanged TOASTed values
// arrive as "unchanged" in updates: the Source keeps, per key, the values
// of the table's variable-length columns (and the set of keys, for
// TRUNCATE) as of the last applied change, and fills them in. This costs
// memory about the size of those columns; REPLICA IDENTITY FULL tables fill
// in from the old row instead.
//
// # Protocol
//
// pgoutput proto_version 1: transactions are applied whole, so streaming
// of in-progress transactions (v2+) would only add messages to buffer.
// Values travel as text on both paths, decoded by the same pgtype.Map, so
// a row read by List and the same row from the stream are equal Go values.
// Both connections set TimeZone=UTC, DateStyle=ISO and extra_float_digits=3.
//
// # Server settings and privileges
//
//	-- postgresql.conf (restart needed)
//	wal_level = logical
//	max_replication_slots = 10   -- one per Source, plus one briefly per late List
//	max_wal_senders = 10
//	max_slot_wal_keep_size = 10GB  -- with Config.PermanentSlot: cap WAL kept for an absent consumer
//
//	CREATE ROLE app_sync LOGIN REPLICATION PASSWORD '...';
//	GRANT SELECT ON public.users, public.orders TO app_sync;
//	-- either let the Source create its publication (the role must own the tables),
//	-- or create it once and set Config.Publication:
//	CREATE PUBLICATION app_pub FOR TABLE public.users, public.orders;
//
// pg_hba.conf must allow the role a "replication" connection to the
// database as well as a normal one.
//
// Temporary slots (the default) disappear with the replication connection;
// a broken stream (server restart, terminated walsender) then means a relist
// of every table. Config.PermanentSlot keeps the slot (name it with
// Config.Slot), so a broken stream resumes from the confirmed position
// without a relist; at start an existing slot is checked in
// pg_replication_slots, and one whose WAL is lost (wal_status 'lost') or
// that was dropped is recreated and every table relists. A permanent slot
// holds WAL while its consumer is away: set max_slot_wal_keep_size, and
// drop the slot (SELECT pg_drop_replication_slot('name')) when the
// application is retired. Its publication is kept by Close.
//
// # Memory
//
// Besides the informers' caches, a Source keeps per table the keys and
// variable-length values described above, the transactions no consumer has
// acknowledged yet (a transaction is held whole: a 100k-row transaction is
// 100k rows in memory once), and Config.History acknowledged changes so
// that a Watch can restart from a slightly older version. A table whose
// informer is stopped for good holds its unacknowledged transactions and
// the slot's WAL: Close the Source when its informers stop.
//
// Import it as is (package postgres); name it pginformer if another
// package postgres is in scope.
package pginformer
