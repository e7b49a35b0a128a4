package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// Config configures a Source. The zero value of every field but ConnString
// means the default.
type Config struct {
	// ConnString is a pgx connection string (URL or key=value) for a role
	// with REPLICATION and SELECT on the tables. It is parsed once and never
	// printed: errors and logs name host, port and user only.
	ConnString string
	// Slot is the replication slot's name. Default: a fresh random name
	// (required with PermanentSlot).
	Slot string
	// PermanentSlot keeps the slot across connections and restarts of
	// either side, so a broken stream resumes without a relist. The server
	// then retains WAL for the slot while this process is down: set
	// max_slot_wal_keep_size so that a forgotten slot cannot fill the
	// disk, and drop the slot (pg_drop_replication_slot) when the
	// application goes away for good. Default: a temporary slot, dropped by
	// the server when the replication connection ends; a broken stream then
	// means a relist.
	PermanentSlot bool
	// Publication to stream. If it exists it is used as is (it must
	// include every table). If it does not, it is created with the tables
	// listed explicitly, and dropped again by Close unless the slot is
	// permanent. Default: a fresh name, or the slot's name for a permanent
	// slot.
	Publication string
	// StatusInterval is how often the confirmed position is reported to the
	// server even when it did not move. It must stay well below the
	// server's wal_sender_timeout (60s by default). Default 5s.
	StatusInterval time.Duration
	// History is how many acknowledged changes per table stay in memory
	// so that a Watch may start from a version before the newest one a
	// consumer acknowledged (as after a watch that broke mid-batch).
	// Older starts get core.ErrExpired and relist. Default 10000.
	History int
	// Logger receives connection-level events. Default: discard.
	Logger *slog.Logger
}

// Source streams a set of tables over one logical replication slot and one
// walsender. Register every table with Table before the first List; each
// table is then its own core.ListerWatcher, typically run by its own
// informer. Close releases the connections.
type Source struct {
	cfg      Config
	log      *slog.Logger
	connCfg  *pgx.ConnConfig
	replCfg  *pgconn.Config
	slot     string
	pub      string
	interval time.Duration
	history  int

	setupMu    sync.Mutex // serialises session setup, snapshot reads and stream starts
	pubCreated bool

	mu          sync.Mutex
	tables      []*tableState
	byOID       map[uint32][]*tableState // a table may be registered more than once, with different types
	types       []*pgtype.Type           // derived types (enums, their arrays) the tables use
	frozen      bool                     // a List happened: the table set is fixed
	sess        *session
	gen         uint64 // stream generation; bumps at every stream start or failure
	streamErr   error  // why the current generation's stream ended; nil while it runs
	pos         core.ResourceVersion
	lastTxn     core.ResourceVersion
	progressReq bool
	resumable   bool // a permanent slot's stream ended: resume it, keep the tables
	closed      bool
	changed     chan struct{} // closed and replaced whenever buffers or pos change
}

// session is one slot lifetime as seen by this process.
type session struct {
	cp core.ResourceVersion
	// While the exported snapshot is held: the importing transaction and
	// the tables already read inside it.
	snapConn *pgx.Conn
	snapTx   pgx.Tx
	listed   map[*tableState]bool
	// The replication connection. Idle while the snapshot is held (any
	// command on it would destroy the snapshot), then streaming.
	repl      *pgconn.PgConn
	snapTimer *time.Timer // starts streaming if the snapshot is held too long
	streaming bool
	cancel    context.CancelFunc
	done      chan struct{}
	slotNew   bool // this process created the slot (vs. resumed an existing permanent one)
}

// NewSource connects once to check the server (wal_level, REPLICATION
// privilege) and returns a Source. Nothing is created on the server until
// the first List.
func NewSource(ctx context.Context, cfg Config) (*Source, error) {
	connCfg, err := pgx.ParseConfig(cfg.ConnString)
	if err != nil {
		// The parse error may quote the connection string; never pass it on.
		return nil, errors.New("postgres: Config.ConnString cannot be parsed (not shown here: it may hold a password)")
	}
	for k, v := range sessionParams {
		connCfg.RuntimeParams[k] = v
	}
	// The Source opens replication connections itself; the snapshot
	// connection must be a normal one.
	delete(connCfg.RuntimeParams, "replication")
	replCfg := connCfg.Config.Copy()
	replCfg.RuntimeParams["replication"] = "database"
	s := &Source{
		cfg:      cfg,
		log:      cfg.Logger,
		connCfg:  connCfg,
		replCfg:  replCfg,
		slot:     cfg.Slot,
		pub:      cfg.Publication,
		interval: cfg.StatusInterval,
		byOID:    map[uint32][]*tableState{},
		changed:  make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.history = cfg.History
	if s.history <= 0 {
		s.history = 10000
	}
	if s.interval <= 0 {
		s.interval = 5 * time.Second
	}
	if cfg.PermanentSlot && s.slot == "" {
		return nil, errors.New("postgres: Config.PermanentSlot needs Config.Slot: a generated slot name cannot be found again after a restart")
	}
	if s.slot == "" {
		s.slot = "dbinformer_" + randomHex(8)
	}
	if s.pub == "" {
		s.pub = "dbinformer_" + randomHex(8)
		if cfg.PermanentSlot {
			// Stable, and kept by Close: the slot decodes its retained
			// WAL with the publication as it was then, so a publication
			// dropped and created again would make that WAL undecodable.
			s.pub = s.slot
		}
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var walLevel string
	var repl, super bool
	err = conn.QueryRow(ctx, `SELECT current_setting('wal_level'), rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&walLevel, &repl, &super)
	if err != nil {
		return nil, s.wrap("check server settings", err)
	}
	if walLevel != "logical" {
		return nil, fmt.Errorf("postgres %s: wal_level is %q, logical replication needs wal_level = logical (ALTER SYSTEM SET wal_level = logical; then restart the server)", s.where(), walLevel)
	}
	if !repl && !super {
		return nil, fmt.Errorf("postgres %s: role %q lacks the REPLICATION attribute needed for a replication slot (ALTER ROLE %s REPLICATION)", s.where(), s.connCfg.User, pgx.Identifier{s.connCfg.User}.Sanitize())
	}
	return s, nil
}

// snapshotHold bounds how long the first List's snapshot is held for the
// other tables to list in it.
const snapshotHold = 30 * time.Second

// sessionParams make both paths (snapshot query and walsender) print values
// the same way, so that they decode to equal Go values.
var sessionParams = map[string]string{
	"TimeZone":           "UTC",
	"DateStyle":          "ISO, MDY",
	"IntervalStyle":      "postgres",
	"extra_float_digits": "3",
	"bytea_output":       "hex",
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// where names the server without secrets.
func (s *Source) where() string {
	return fmt.Sprintf("%s:%d user %q", s.connCfg.Host, s.connCfg.Port, s.connCfg.User)
}

// wrap adds context to a server error. pgconn's errors name user and
// database but never the password; the connection string is never added.
func (s *Source) wrap(what string, err error) error {
	return fmt.Errorf("postgres %s: %s: %w", s.where(), what, err)
}

func (s *Source) connect(ctx context.Context) (*pgx.Conn, error) {
	c, err := pgx.ConnectConfig(ctx, s.connCfg.Copy())
	if err != nil {
		return nil, s.wrap("connect", err)
	}
	return c, nil
}

func (s *Source) connectRepl(ctx context.Context) (*pgconn.PgConn, error) {
	c, err := pgconn.ConnectConfig(ctx, s.replCfg.Copy())
	if err != nil {
		return nil, s.wrap("open replication connection", err)
	}
	return c, nil
}

// SlotName is the replication slot's name.
func (s *Source) SlotName() string { return s.slot }

// PublicationName is the publication's name.
func (s *Source) PublicationName() string { return s.pub }

// Head returns pg_current_wal_lsn(): the newest version of the server.
func (s *Source) Head(ctx context.Context) (core.ResourceVersion, error) {
	c, err := s.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	var lsn pglogrepl.LSN
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
		return 0, s.wrap("read pg_current_wal_lsn()", err)
	}
	return core.ResourceVersion(lsn), nil
}

// Close stops the stream, closes the connections (a temporary slot goes
// with them) and drops the publication if this Source created it. Watchers
// then return an error.
func (s *Source) Close() error {
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sess := s.sess
	s.sess = nil
	s.failLocked(errors.New("postgres: source closed"), true)
	s.mu.Unlock()
	if sess != nil {
		s.endSession(sess)
	}
	if s.pubCreated && !s.cfg.PermanentSlot {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := s.connect(ctx); err == nil {
			if _, err := c.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{s.pub}.Sanitize()); err != nil {
				s.log.Warn("drop publication", "publication", s.pub, "err", err)
			}
			c.Close(ctx)
		}
	}
	return nil
}

func (s *Source) endSession(sess *session) {
	if sess.snapTimer != nil {
		sess.snapTimer.Stop()
	}
	if sess.cancel != nil {
		sess.cancel()
		<-sess.done
	}
	if sess.snapTx != nil {
		sess.snapTx.Rollback(context.Background())
	}
	if sess.snapConn != nil {
		sess.snapConn.Close(context.Background())
	}
	if sess.repl != nil {
		sess.repl.Close(context.Background())
	}
}

// notifyLocked wakes every watcher.
func (s *Source) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// failLocked ends the current stream generation. expired says the slot is
// gone: every table must relist.
func (s *Source) failLocked(err error, expired bool) {
	s.gen++
	s.streamErr = err
	if expired {
		for _, t := range s.tables {
			t.expire()
		}
	}
	s.notifyLocked()
}

// ensurePublication creates the publication if it is missing, or checks
// that the existing one carries every table.
func (s *Source) ensurePublication(ctx context.Context, conn *pgx.Conn) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", s.pub).Scan(&exists); err != nil {
		return s.wrap("look up publication", err)
	}
	if !exists {
		sql := "CREATE PUBLICATION " + pgx.Identifier{s.pub}.Sanitize() + " FOR TABLE "
		seen := map[uint32]bool{}
		for _, t := range s.tables {
			if seen[t.oid] {
				continue
			}
			if len(seen) > 0 {
				sql += ", "
			}
			seen[t.oid] = true
			sql += t.ident.Sanitize()
		}
		if _, err := conn.Exec(ctx, sql); err != nil {
			return s.wrap(fmt.Sprintf("create publication %q (needs ownership of the tables, or create it yourself and set Config.Publication)", s.pub), err)
		}
		s.pubCreated = true
		return nil
	}
	for _, t := range s.tables {
		var ok bool
		err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)", s.pub, t.schema, t.name).Scan(&ok)
		if err != nil {
			return s.wrap("look up publication tables", err)
		}
		if !ok {
			return fmt.Errorf("postgres %s: publication %q does not include table %s (ALTER PUBLICATION %s ADD TABLE %s)", s.where(), s.pub, t.ident.Sanitize(), pgx.Identifier{s.pub}.Sanitize(), t.ident.Sanitize())
		}
	}
	return nil
}

// newSession sets up the slot. With a new slot it holds the slot's exported
// snapshot open in a REPEATABLE READ transaction so that List can read
// every table at the slot's consistent point. Called with setupMu held.
func (s *Source) newSession(ctx context.Context) (*session, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.ensurePublication(ctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	sess := &session{listed: map[*tableState]bool{}}
	if s.cfg.PermanentSlot {
		var walStatus *string
		var confirmed *pglogrepl.LSN
		err := conn.QueryRow(ctx, "SELECT wal_status, confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1", s.slot).Scan(&walStatus, &confirmed)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			conn.Close(context.Background())
			return nil, s.wrap("look up replication slot", err)
		case walStatus != nil && *walStatus == "lost" || confirmed == nil:
			s.log.Warn("replication slot lost its WAL; dropping and recreating it", "slot", s.slot)
			if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", s.slot); err != nil {
				conn.Close(context.Background())
				return nil, s.wrap("drop lost replication slot", err)
			}
		default:
			// Resume an existing slot: Lists use helper snapshots that are
			// newer than its confirmed position.
			conn.Close(context.Background())
			repl, err := s.connectRepl(ctx)
			if err != nil {
				return nil, err
			}
			sess.repl = repl
			sess.cp = core.ResourceVersion(*confirmed)
			return sess, nil
		}
	}
	repl, err := s.connectRepl(ctx)
	if err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, pgx.Identifier{s.slot}.Sanitize(), "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary:      !s.cfg.PermanentSlot,
		SnapshotAction: "EXPORT_SNAPSHOT",
		Mode:           pglogrepl.LogicalReplication,
	})
	if err != nil {
		conn.Close(context.Background())
		repl.Close(context.Background())
		return nil, s.wrap(fmt.Sprintf("create replication slot %q", s.slot), err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		conn.Close(context.Background())
		repl.Close(context.Background())
		return nil, fmt.Errorf("postgres %s: slot consistent point %q: %w", s.where(), res.ConsistentPoint, err)
	}
	// Import the snapshot before anything else is sent on repl: any command
	// there would destroy it.
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err == nil {
		_, err = tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+res.SnapshotName+"'")
	}
	if err != nil {
		conn.Close(context.Background())
		repl.Close(context.Background())
		return nil, s.wrap("import the slot's snapshot", err)
	}
	sess.cp = core.ResourceVersion(cp)
	sess.snapConn, sess.snapTx, sess.repl, sess.slotNew = conn, tx, repl, true
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
	s.log.Info("replication slot created", "slot", s.slot, "consistent_point", cp.String(), "temporary", !s.cfg.PermanentSlot)
	return sess, nil
}

// startStream ends the held snapshot (if any) and starts streaming.
// Called with setupMu held and s.mu not held.
func (s *Source) startStream(ctx context.Context, sess *session) error {
	s.mu.Lock()
	streaming := sess.streaming
	s.mu.Unlock()
	if streaming {
		return nil
	}
	if sess.snapTx != nil {
		sess.snapTx.Rollback(ctx)
		sess.snapConn.Close(ctx)
		sess.snapTx, sess.snapConn = nil, nil
	}
	s.mu.Lock()
	start := s.ackLocked()
	if start < sess.cp {
		start = sess.cp
	}
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
		err = s.wrap(fmt.Sprintf("start replication on slot %q", s.slot), err)
		s.mu.Lock()
		if s.sess == sess {
			s.sess = nil
		}
		if s.cfg.PermanentSlot {
			s.resumable = true
			s.failLocked(err, false)
		} else {
			s.failLocked(fmt.Errorf("%w: %w", err, core.ErrExpired), true)
		}
		s.mu.Unlock()
		s.endSession(sess)
		return err
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
	s.mu.Unlock()
	go s.stream(sctx, sess, gen)
	return nil
}

// quoteLiteral makes s a SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// ackLocked is the position every table has applied: the stream position,
// held back by the oldest batch some table has not acknowledged yet. The
// server may discard WAL up to it.
func (s *Source) ackLocked() core.ResourceVersion {
	ack := s.pos
	for _, t := range s.tables {
		if b := t.pending(); b != nil && b.commitLSN < ack {
			ack = b.commitLSN
		}
	}
	return ack
}

// ensureStreaming is called by Watch: the stream must run for the watcher
// to get anything.
func (s *Source) ensureStreaming(ctx context.Context) error {
	// Fast path: a long List of another table holds setupMu.
	s.mu.Lock()
	running := s.sess != nil && s.sess.streaming && !s.closed
	s.mu.Unlock()
	if running {
		return nil
	}
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	s.mu.Lock()
	sess, closed, resumable := s.sess, s.closed, s.resumable
	s.mu.Unlock()
	if closed {
		return errors.New("postgres: source closed")
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
// ended, from the confirmed position, keeping every table's state. Called
// with setupMu held.
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
	s.log.Info("replication stream resumed", "slot", s.slot)
	return nil
}

// pendingTxn collects one transaction's changes per table.
type pendingTxn struct {
	commit  core.ResourceVersion // commit record start (Begin.FinalLSN)
	changes map[*tableState][]change
}

func (p *pendingTxn) add(ts []*tableState, c change) {
	for _, t := range ts {
		p.changes[t] = append(p.changes[t], c)
	}
}

// stream reads the replication stream until ctx ends or it fails.
func (s *Source) stream(ctx context.Context, sess *session, gen uint64) {
	defer close(sess.done)
	err := s.streamLoop(ctx, sess)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return
	}
	if ctx.Err() != nil && err == nil {
		err = errors.New("postgres: stream stopped")
	}
	temporary := !s.cfg.PermanentSlot
	if temporary {
		err = fmt.Errorf("postgres %s: replication stream of temporary slot %q ended (the server dropped the slot with its connection): %w: %w", s.where(), s.slot, core.ErrExpired, err)
	} else {
		err = fmt.Errorf("postgres %s: replication stream of slot %q ended: %w", s.where(), s.slot, err)
		s.resumable = true
	}
	if s.sess == sess {
		s.sess = nil
	}
	go s.endSession(sess)
	s.log.Warn("replication stream ended", "slot", s.slot, "err", err)
	s.failLocked(err, temporary)
}

func (s *Source) streamLoop(ctx context.Context, sess *session) error {
	relations := map[uint32]*relation{}
	var txn *pendingTxn
	var lastSent core.ResourceVersion
	lastSentAt := time.Time{}
	for {
		s.mu.Lock()
		ack := s.ackLocked()
		reply := s.progressReq
		s.progressReq = false
		s.mu.Unlock()
		// Report a moved position promptly but at most every 100ms, and
		// the same position every interval (it is also our keepalive).
		since := time.Since(lastSentAt)
		if reply || since >= s.interval || ack != lastSent && since >= 100*time.Millisecond {
			err := pglogrepl.SendStandbyStatusUpdate(ctx, sess.repl, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: pglogrepl.LSN(ack),
				WALFlushPosition: pglogrepl.LSN(ack),
				WALApplyPosition: pglogrepl.LSN(ack),
				ClientTime:       time.Now(),
				ReplyRequested:   reply,
			})
			if err != nil {
				return fmt.Errorf("send standby status: %w", err)
			}
			lastSent, lastSentAt = ack, time.Now()
		}
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		msg, err := sess.repl.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				continue
			}
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyDone:
			return errors.New("server ended the replication stream")
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return err
				}
				if txn == nil {
					// Everything before the server's WAL end has been sent
					// to us; with no transaction open, nothing below it is
					// pending.
					s.mu.Lock()
					if rv := core.ResourceVersion(ka.ServerWALEnd); rv > s.pos {
						s.pos = rv
						s.notifyLocked()
					}
					if ka.ReplyRequested {
						lastSentAt = time.Time{}
					}
					s.mu.Unlock()
				} else if ka.ReplyRequested {
					lastSentAt = time.Time{}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return err
				}
				txn, err = s.handle(xld.WALData, relations, txn)
				if err != nil {
					return err
				}
			}
		}
	}
}

// handle applies one pgoutput message.
func (s *Source) handle(data []byte, relations map[uint32]*relation, txn *pendingTxn) (*pendingTxn, error) {
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return txn, fmt.Errorf("parse pgoutput message: %w", err)
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		return &pendingTxn{commit: core.ResourceVersion(m.FinalLSN), changes: map[*tableState][]change{}}, nil
	case *pglogrepl.RelationMessage:
		relations[m.RelationID] = newRelation(m)
	case *pglogrepl.InsertMessage:
		if ts, rel := s.lookup(relations, m.RelationID); txn != nil {
			txn.add(ts, change{kind: changeInsert, rel: rel, new: tupleOf(m.Tuple)})
		}
	case *pglogrepl.UpdateMessage:
		if ts, rel := s.lookup(relations, m.RelationID); txn != nil {
			c := change{kind: changeUpdate, rel: rel, new: tupleOf(m.NewTuple)}
			if m.OldTuple != nil {
				c.old, c.oldKind = tupleOf(m.OldTuple), m.OldTupleType
			}
			txn.add(ts, c)
		}
	case *pglogrepl.DeleteMessage:
		if ts, rel := s.lookup(relations, m.RelationID); txn != nil {
			txn.add(ts, change{kind: changeDelete, rel: rel, old: tupleOf(m.OldTuple), oldKind: m.OldTupleType})
		}
	case *pglogrepl.TruncateMessage:
		if txn != nil {
			for _, id := range m.RelationIDs {
				ts, _ := s.lookup(relations, id)
				txn.add(ts, change{kind: changeTruncate})
			}
		}
	case *pglogrepl.CommitMessage:
		if txn == nil {
			return nil, nil
		}
		rv := core.ResourceVersion(m.TransactionEndLSN)
		s.mu.Lock()
		if rv > s.lastTxn { // on a resumed stream, skip what we had
			for t, cs := range txn.changes {
				switch {
				case !t.active:
				case rv <= t.applied:
					// Listed by a helper snapshot the stream had not
					// reached: the table has this transaction already.
					t.floor = max(t.floor, rv)
				default:
					t.batches = append(t.batches, batch{rv: rv, commitLSN: txn.commit, changes: cs})
				}
			}
			s.lastTxn = rv
		}
		if rv > s.pos {
			s.pos = rv
		}
		s.notifyLocked()
		s.mu.Unlock()
		return nil, nil
	}
	return txn, nil
}

// lookup finds the registered table of a relation. Whether the table is
// active (listed) is decided at commit, under the lock that also moves pos,
// so a table activated mid-transaction still gets that transaction.
func (s *Source) lookup(relations map[uint32]*relation, id uint32) ([]*tableState, *relation) {
	s.mu.Lock()
	ts := s.byOID[id]
	s.mu.Unlock()
	if ts == nil {
		return nil, nil
	}
	return ts, relations[id]
}

// requestProgress asks the server for a keepalive carrying its WAL end.
func (s *Source) requestProgress() {
	s.mu.Lock()
	s.progressReq = true
	s.mu.Unlock()
}
