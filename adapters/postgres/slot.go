package pginformer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
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
	sess, err := s.openSession(ctx)
	if err != nil {
		return 0, err
	}
	if sn := sess.snap; sn != nil {
		fresh := s.fan.activate(&st.feed, sess.cp)
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
	// From here on the stream keeps this table's transactions; the
	// helper's consistent point below is at or after the stream's position.
	fresh := s.fan.activateAtStream(&st.feed)
	// The helper's snapshot is this List's alone: other Lists and stream
	// starts need not wait for it.
	s.setupMu.Unlock()
	locked = false
	if err := s.takeReader(ctx); err != nil {
		return 0, err
	}
	defer func() { <-s.readers }()
	rv, err := s.helperSnapshot(ctx, "dbinformer_list_", func(r *snapReaders, rv core.ResourceVersion) error {
		return read(r, rv, fresh)
	})
	if err != nil {
		if s.readCtx.Err() != nil {
			return 0, errClosed
		}
		return 0, err
	}
	if fresh {
		s.fan.listedAt(&st.feed, rv)
	}
	s.log.Debug("table listed in a helper slot's snapshot", "table", st.ident.Sanitize(), "rv", lsn(rv))
	return rv, nil
}

// helperSnapshot runs read inside the exported snapshot of a short-lived
// temporary slot (named prefix and random hex) created on a replication
// connection of its own, and returns the slot's consistent point, the
// snapshot's version. The slot touches no state of the Source's session
// and stream: the late Lists (snapshotFor) and the audit (AuditList) read
// through it. read gets a first reader that imported the snapshot; the
// caller decides whether it holds a reader slot (Options.SnapshotReaders).
// The slot is dropped before helperSnapshot returns, or, when its
// connection failed, goes with the connection (a temporary slot does not
// outlive its session).
func (s *Source) helperSnapshot(ctx context.Context, prefix string, read func(r *snapReaders, rv core.ResourceVersion) error) (core.ResourceVersion, error) {
	repl, err := s.connectRepl(ctx)
	if err != nil {
		return 0, err
	}
	defer repl.Close(context.Background())
	slot := prefix + randomHex(8)
	sn, err := s.exportSnapshot(ctx, repl, slot, true)
	if err != nil {
		return 0, err
	}
	defer func() {
		// Dropped at once rather than when the server notices the
		// connection's end, so that no caller sees it linger. Bounded:
		// a connection that hangs is closed below all the same.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), helperDropWait)
		defer cancel()
		if err := pglogrepl.DropReplicationSlot(dctx, repl, pgx.Identifier{slot}.Sanitize(), pglogrepl.DropReplicationSlotOptions{}); err != nil {
			s.log.Debug("drop helper slot (its connection's end drops it)", "slot", slot, "err", err)
		}
	}()
	first, err := s.importSnapshot(ctx, sn)
	if err != nil {
		return 0, err
	}
	err = read(&snapReaders{s: s, sn: sn, first: first}, sn.cp)
	first.close(s)
	sn.release()
	if err != nil {
		return 0, err
	}
	return sn.cp, nil
}

// helperDropWait bounds the drop of a helper slot.
const helperDropWait = 5 * time.Second

// openSession returns the slot session, opening one if there is none: a
// permanent slot whose stream ended is resumed (every table keeps its
// state), else a new session is set up (newSession) and every table must
// list or restore again. It freezes the table set. List and Restore both
// open the session here. Called with setupMu held.
func (s *Source) openSession(ctx context.Context) (*session, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	s.frozen = true
	sess, resumable := s.sess, s.resumable
	s.mu.Unlock()
	if sess == nil && resumable {
		if err := s.resume(ctx); err != nil && !errors.Is(err, driver.ErrExpired) {
			return nil, err
		}
		s.mu.Lock()
		sess = s.sess
		s.mu.Unlock()
	}
	if sess != nil {
		return sess, nil
	}
	sess, err := s.newSession(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.sess = sess
	s.fan.session(sess.cp)
	s.mu.Unlock()
	return sess, nil
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

// snapshotInvalid reports whether err says that an exported snapshot no
// longer exists: the connection that exported it ended (a server restart,
// a cut connection), though nothing has been read on it to notice.
func snapshotInvalid(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22023" && strings.Contains(pgErr.Message, "snapshot")
}
