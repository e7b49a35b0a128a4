package pginformer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The slot session: one owner for the replication slot's lifetime as this
// process sees it: the publication, slot creation with its exported
// snapshot, the snapshots tables list in, starting and resuming the
// stream. Everything here runs with setupMu held unless said otherwise.

// session is one slot lifetime as seen by this process.
type session struct {
	cp core.ResourceVersion
	// While the slot's exported snapshot is held: the importing
	// transaction and the tables already read inside it.
	snap   *snapshot
	listed map[*tableState]bool
	// resumed: an existing permanent slot, which has no exported snapshot
	// (set at creation, read under either lock).
	resumed bool
	// The replication connection. Idle while the snapshot is held (any
	// command on it would destroy the snapshot), then streaming.
	repl      *pgconn.PgConn
	snapTimer *time.Timer // starts streaming if the snapshot is held too long
	streaming bool
	cancel    context.CancelFunc
	done      chan struct{}
}

// snapshot is a slot's exported snapshot: importable by any number of
// transactions (SET TRANSACTION SNAPSHOT) until the next command on the
// replication connection that exported it, or its end. release marks it
// gone once no import is under way.
type snapshot struct {
	cp   core.ResourceVersion // the slot's consistent point: the snapshot's version
	name string
	mu   sync.RWMutex // held for reading by imports, for writing by release
	gone bool
}

func (sn *snapshot) release() {
	sn.mu.Lock()
	sn.gone = true
	sn.mu.Unlock()
}

// exportSnapshot creates slot on repl with an exported snapshot. Nothing
// may be sent on repl while the snapshot is to be imported.
func (s *Source) exportSnapshot(ctx context.Context, repl *pgconn.PgConn, slot string, temporary bool) (*snapshot, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, pgx.Identifier{slot}.Sanitize(), "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary:      temporary,
		SnapshotAction: "EXPORT_SNAPSHOT",
		Mode:           pglogrepl.LogicalReplication,
	})
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("create replication slot %q", slot), err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: slot consistent point %q: %w", s.where(), res.ConsistentPoint, err)
	}
	return &snapshot{cp: core.ResourceVersion(cp), name: res.SnapshotName}, nil
}

// snapshotFor runs read inside a snapshot that matches a position of the
// stream, and returns that position, from which st's changes are kept.
// fresh tells read that the table had no state: it builds the known keys
// and values, parked at the snapshot's version. The first Lists of a
// session read inside the slot's own exported snapshot; a later one inside
// the snapshot of a short-lived temporary helper slot. Either way read
// gets readers that imported the snapshot on their own connections, and
// runs without setupMu: Lists of several tables read at once, bounded by
// Options.SnapshotReaders. The first call freezes the table set.
func (s *Source) snapshotFor(ctx context.Context, st *tableState, read func(r *snapReaders, rv core.ResourceVersion, fresh bool) error) (core.ResourceVersion, error) {
	// Close cancels reads under way.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	unwatch := context.AfterFunc(s.readCtx, stop)
	defer unwatch()
	s.setupMu.Lock()
	locked := true
	defer func() {
		if locked {
			s.setupMu.Unlock()
		}
	}()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, errClosed
	}
	s.frozen = true
	sess, resumable := s.sess, s.resumable
	s.mu.Unlock()
	if sess == nil && resumable {
		if err := s.resume(ctx); err != nil && !errors.Is(err, core.ErrExpired) {
			return 0, err
		}
		s.mu.Lock()
		sess = s.sess
		s.mu.Unlock()
	}
	if sess == nil {
		var err error
		if sess, err = s.newSession(ctx); err != nil {
			return 0, err
		}
		s.mu.Lock()
		s.sess = sess
		s.pos, s.lastTxn = sess.cp, sess.cp
		for _, t := range s.tables {
			t.expire()
		}
		s.notifyLocked()
		s.mu.Unlock()
	}
	if sn := sess.snap; sn != nil {
		s.mu.Lock()
		fresh := !st.active
		if fresh {
			s.activateLocked(st, sess.cp)
		}
		s.mu.Unlock()
		// Import first, then wait for a reader slot: every table whose List
		// started before the stream reads in the slot's own snapshot.
		first, err := s.importSnapshot(ctx, sn)
		if err != nil {
			if snapshotInvalid(err) {
				// Retrying the import cannot work until the snapshot
				// hold ends (snapshotHold): start over with a new session.
				return 0, s.abandonSession(sess, fmt.Errorf("the slot's exported snapshot is gone with its replication connection: %w", err))
			}
			return 0, err
		}
		s.setupMu.Unlock()
		locked = false
		if err = s.takeReader(ctx); err == nil {
			err = read(&snapReaders{s: s, sn: sn, first: first}, sess.cp, fresh)
			<-s.readers
		}
		first.close(s)
		s.setupMu.Lock()
		locked = true
		if err != nil {
			if s.readCtx.Err() != nil {
				return 0, errClosed
			}
			return 0, err
		}
		sess.listed[st] = true
		s.mu.Lock()
		current := s.sess == sess && !s.closed
		s.mu.Unlock()
		if current && len(sess.listed) == len(s.tables) {
			// Every table has its snapshot: stream.
			if err := s.startStream(ctx, sess); err != nil {
				return 0, err
			}
		}
		return sess.cp, nil
	}
	s.mu.Lock()
	fresh := !st.active
	if fresh {
		// From here on the stream keeps this table's transactions; the
		// helper's consistent point below is at or after s.pos.
		s.activateLocked(st, s.pos)
	}
	s.mu.Unlock()
	// The helper's snapshot is this List's alone: other Lists and stream
	// starts need not wait for it.
	s.setupMu.Unlock()
	locked = false
	if err := s.takeReader(ctx); err != nil {
		return 0, err
	}
	defer func() { <-s.readers }()
	repl, err := s.connectRepl(ctx)
	if err != nil {
		return 0, err
	}
	defer repl.Close(context.Background())
	sn, err := s.exportSnapshot(ctx, repl, "dbinformer_list_"+randomHex(8), true)
	if err != nil {
		return 0, err
	}
	first, err := s.importSnapshot(ctx, sn)
	if err != nil {
		return 0, err
	}
	err = read(&snapReaders{s: s, sn: sn, first: first}, sn.cp, fresh)
	first.close(s)
	if err != nil {
		if s.readCtx.Err() != nil {
			return 0, errClosed
		}
		return 0, err
	}
	s.mu.Lock()
	if fresh && st.active {
		// The table's state is now the snapshot's: what the stream kept
		// up to it is in the rows read. (A table that was active keeps its
		// state, which the stream moves in order, and its history, from
		// which earlier Lists' watches go on.)
		drop := st.firstAfter(sn.cp)
		clear(st.batches[:drop])
		st.batches = st.batches[drop:]
		st.floor, st.applied, st.decoded, st.covered, st.ackedChanges = sn.cp, max(st.applied, sn.cp), sn.cp, sn.cp, 0
	}
	s.mu.Unlock()
	s.log.Debug("table listed in a helper slot's snapshot", "table", st.ident.Sanitize(), "rv", lsn(sn.cp))
	return sn.cp, nil
}

// ensurePublication creates the Source's own publication, or completes it
// (a permanent slot's publication from an earlier run may lack a table
// registered since). A publication the Source does not own is checked.
func (s *Source) ensurePublication(ctx context.Context, conn *pgx.Conn) error {
	if !s.pubOwned {
		for _, t := range s.tables {
			if err := s.checkPublication(ctx, conn, t); err != nil {
				return err
			}
			if err := s.checkPublishedColumns(ctx, conn, t); err != nil {
				return err
			}
		}
		return nil
	}
	pub := pgx.Identifier{s.pub}.Sanitize()
	var exists, viaRoot bool
	err := conn.QueryRow(ctx, "SELECT true, pubviaroot FROM pg_publication WHERE pubname = $1", s.pub).Scan(&exists, &viaRoot)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return s.wrap("look up publication", err)
	}
	var serverVersion int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&serverVersion); err != nil {
		return s.wrap("read the server version", err)
	}
	seen := map[uint32]bool{}
	list := ""
	for _, t := range s.tables {
		if seen[t.oid] {
			continue
		}
		seen[t.oid] = true
		if exists {
			var member bool
			if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)", s.pub, t.schema, t.name).Scan(&member); err != nil {
				return s.wrap("look up publication tables", err)
			}
			if member {
				// A publication of an earlier run (a permanent slot's, or
				// a named one a crash left): it must still send every
				// column of every Table of the table.
				for _, u := range s.byOID[t.oid] {
					if err := s.checkPublishedColumns(ctx, conn, u); err != nil {
						return err
					}
				}
				continue
			}
		}
		if list != "" {
			list += ", "
		}
		list += t.ident.Sanitize()
		if cl := s.columnList(t.oid, serverVersion); cl != nil {
			ids := make([]string, len(cl))
			for i, c := range cl {
				ids[i] = pgx.Identifier{c}.Sanitize()
			}
			list += " (" + strings.Join(ids, ", ") + ")"
		}
		if rf := s.rowFilter(t.oid, serverVersion); rf != "" {
			list += " WHERE (" + rf + ")"
		}
	}
	var sql string
	switch {
	case !exists:
		// Partitioned tables publish their changes under their own name.
		sql = "CREATE PUBLICATION " + pub + " FOR TABLE " + list + " WITH (publish_via_partition_root = true)"
	case !viaRoot:
		sql = "ALTER PUBLICATION " + pub + " SET (publish_via_partition_root = true)"
		if list != "" {
			sql += "; ALTER PUBLICATION " + pub + " ADD TABLE " + list
		}
	case list != "":
		sql = "ALTER PUBLICATION " + pub + " ADD TABLE " + list
	default:
		return nil
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		return s.wrap(fmt.Sprintf("create publication %q (needs ownership of the tables, or create it yourself and set Options.Publication)", s.pub), err)
	}
	if !exists {
		s.pubCreated = true
	}
	return nil
}

// newSession sets up the slot. With a new slot it holds the slot's exported
// snapshot open so that the first Lists read every table at the slot's
// consistent point; an existing permanent slot is resumed.
func (s *Source) newSession(ctx context.Context) (*session, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer s.release(conn)
	if err := s.ensurePublication(ctx, conn); err != nil {
		return nil, err
	}
	sess := &session{listed: map[*tableState]bool{}}
	if s.opts.PermanentSlot {
		var walStatus *string
		var confirmed *pglogrepl.LSN
		err := conn.QueryRow(ctx, "SELECT wal_status, confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1", s.slot).Scan(&walStatus, &confirmed)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, s.wrap("look up replication slot", err)
		case walStatus != nil && *walStatus == "lost" || confirmed == nil:
			s.log.Warn("replication slot lost its WAL; dropping and recreating it", "slot", s.slot)
			if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", s.slot); err != nil {
				return nil, s.wrap("drop lost replication slot", err)
			}
		default:
			// Resume an existing slot: Lists use helper snapshots that are
			// newer than its confirmed position.
			repl, err := s.connectRepl(ctx)
			if err != nil {
				return nil, err
			}
			sess.repl = repl
			sess.cp = core.ResourceVersion(*confirmed)
			sess.resumed = true
			return sess, nil
		}
	}
	repl, err := s.connectRepl(ctx)
	if err != nil {
		return nil, err
	}
	sn, err := s.exportSnapshot(ctx, repl, s.slot, !s.opts.PermanentSlot)
	if err != nil {
		repl.Close(context.Background())
		return nil, err
	}
	sess.cp, sess.snap, sess.repl = sn.cp, sn, repl
	// The held snapshot pins the server's xmin (vacuum waits) and the slot
	// does not advance until streaming starts; if some table never lists
	// and no Watch comes, start anyway. Late tables list via a helper.
	sess.snapTimer = time.AfterFunc(snapshotHold, func() {
		s.setupMu.Lock()
		defer s.setupMu.Unlock()
		s.mu.Lock()
		current := s.sess == sess && !s.closed
		s.mu.Unlock()
		if current {
			if err := s.startStream(context.Background(), sess); err != nil {
				s.log.Warn("start streaming after the snapshot hold", "err", err)
			}
		}
	})
	s.log.Info("replication slot created", "slot", s.slot, "consistent_point", lsn(sn.cp), "temporary", !s.opts.PermanentSlot)
	return sess, nil
}

// startStream ends the held snapshot (if any) and starts streaming.
// Called with s.mu not held.
func (s *Source) startStream(ctx context.Context, sess *session) error {
	s.mu.Lock()
	streaming := sess.streaming
	s.mu.Unlock()
	if streaming {
		return nil
	}
	if sess.snap != nil {
		sess.snap.release()
		sess.snap = nil
	}
	s.mu.Lock()
	start := max(s.ackLocked(), sess.cp)
	s.mu.Unlock()
	// proto_version 1: we apply whole transactions, so v2's streaming of
	// in-progress transactions (and v3/v4's two-phase and parallel
	// streaming) would only add messages we must buffer anyway.
	err := pglogrepl.StartReplication(ctx, sess.repl, pgx.Identifier{s.slot}.Sanitize(), pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '1'",
			"publication_names " + quoteLiteral(pgx.Identifier{s.pub}.Sanitize()),
		},
	})
	if err != nil {
		// The connection is in an unknown state: give it up. A temporary
		// slot goes with it (every table relists); a permanent one is
		// resumed by the next Watch.
		return s.abandonSession(sess, s.wrap(fmt.Sprintf("start replication on slot %q at %s", s.slot, lsn(start)), err))
	}
	sctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	sess.cancel, sess.done, sess.streaming = cancel, make(chan struct{}), true
	s.gen++
	s.streamErr = nil
	gen := s.gen
	if s.pos < start {
		s.pos = start
	}
	s.notifyLocked()
	s.mu.Unlock()
	go s.stream(sctx, sess, gen)
	return nil
}

// restoreWait bounds how long a Watch holds the stream back for the other
// checkpointing tables of its Source (awaitRestores).
const restoreWait = 2 * time.Second

// awaitRestores waits, up to restoreWait, while another table of the Source
// has a checkpointing informer (gated) and has neither restored nor listed
// yet: once the stream runs past that table's checkpoint, its Restore
// fails and it relists. Informers started together restore within
// milliseconds (as soon as their checkpoint's header is read); the bound
// keeps a table whose informer never gets there from holding the others.
func (s *Source) awaitRestores(ctx context.Context) {
	deadline := time.NewTimer(restoreWait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		waiting := false
		for _, t := range s.tables {
			waiting = waiting || t.gated && !t.active
		}
		// Only a resumed slot (no exported snapshot): on a new one, the
		// first Lists already start the stream once every table listed.
		resumed := s.sess != nil && s.sess.resumed && !s.sess.streaming
		changed := s.changed // a table turning active or the stream starting closes it
		s.mu.Unlock()
		if !waiting || !resumed {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-changed:
		}
	}
}

// ensureStreaming is called by Watch: the stream must run for the watch to
// get anything. setupMu is not held.
func (s *Source) ensureStreaming(ctx context.Context) error {
	// Fast path: a long List of another table holds setupMu.
	s.mu.Lock()
	running := s.sess != nil && s.sess.streaming && !s.closed
	s.mu.Unlock()
	if running {
		return nil
	}
	s.awaitRestores(ctx)
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	s.mu.Lock()
	sess, closed, resumable := s.sess, s.closed, s.resumable
	s.mu.Unlock()
	if closed {
		return errClosed
	}
	if sess == nil {
		if resumable {
			return s.resume(ctx)
		}
		return fmt.Errorf("postgres %s: no replication slot: %w", s.where(), core.ErrExpired)
	}
	return s.startStream(ctx, sess)
}

// resume restarts the stream of a permanent slot after its connection
// ended, from the confirmed position, keeping every table's state.
func (s *Source) resume(ctx context.Context) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	var walStatus *string
	err = conn.QueryRow(ctx, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", s.slot).Scan(&walStatus)
	conn.Close(context.Background())
	if errors.Is(err, pgx.ErrNoRows) || err == nil && walStatus != nil && *walStatus == "lost" {
		err := fmt.Errorf("postgres %s: replication slot %q is gone or lost its WAL: %w", s.where(), s.slot, core.ErrExpired)
		s.mu.Lock()
		s.resumable = false
		s.failLocked(err, true)
		s.mu.Unlock()
		return err
	}
	if err != nil {
		return s.wrap("look up replication slot", err)
	}
	repl, err := s.connectRepl(ctx)
	if err != nil {
		return err
	}
	ns := &session{repl: repl, listed: map[*tableState]bool{}}
	s.mu.Lock()
	// Installed before the stream starts, so that a stream that fails at
	// once finds itself current and marks the slot resumable again.
	ns.cp = s.pos
	s.sess, s.resumable = ns, false
	s.mu.Unlock()
	if err := s.startStream(ctx, ns); err != nil {
		return err // startStream tore ns down and marked the slot resumable
	}
	s.log.Info("replication stream resumed", "slot", s.slot, "from", lsn(ns.cp))
	return nil
}

// abandonSession gives up sess, whose replication connection is gone or
// in an unknown state, and returns err as its watches see it: a temporary
// slot goes with the connection (every table relists), a permanent one is
// resumed by the next List or Watch. Called with s.mu not held.
func (s *Source) abandonSession(sess *session, err error) error {
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
	}
	if s.opts.PermanentSlot {
		s.resumable = true
		s.failLocked(err, false)
	} else {
		err = fmt.Errorf("%w: %w", err, core.ErrExpired)
		s.failLocked(err, true)
	}
	s.mu.Unlock()
	s.endSession(sess)
	return err
}

// snapshotInvalid reports whether err says that an exported snapshot no
// longer exists: the connection that exported it ended (a server restart,
// a cut connection), though nothing has been read on it to notice.
func snapshotInvalid(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22023" && strings.Contains(pgErr.Message, "snapshot")
}

func (s *Source) endSession(sess *session) {
	if sess.snapTimer != nil {
		sess.snapTimer.Stop()
	}
	if sess.cancel != nil {
		sess.cancel()
		<-sess.done
	}
	if sess.snap != nil {
		sess.snap.release()
	}
	if sess.repl != nil {
		sess.repl.Close(context.Background())
	}
}
