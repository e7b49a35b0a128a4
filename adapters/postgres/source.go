package pginformer

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// ErrClosed is matched (with errors.Is) by what List and Watch return once
// the Source is closed. It is permanent (it also matches driver.ErrPermanent):
// an informer whose Source was closed stops instead of retrying.
var ErrClosed = errors.New("pginformer: source closed")

// errClosed is ErrClosed marked permanent.
var errClosed = driver.Permanent(ErrClosed)

// Options configures a Source. The zero value of every field means the
// default.
type Options struct {
	// Slot is the replication slot's name: 1 to 63 lowercase letters,
	// digits and underscores. Default: a fresh random name (required with
	// PermanentSlot).
	Slot string
	// PermanentSlot keeps the slot across connections and restarts of
	// either side, so a broken stream (a terminated walsender, a server
	// restart) resumes without a relist. A restart of this process lists
	// every table again unless its informers start from a checkpoint
	// (core.InformerOptions.Checkpoint; see "Warm restarts" in the package
	// doc), which needs this permanent slot. The server retains WAL for the slot while
	// this process is down: set max_slot_wal_keep_size so that a forgotten
	// slot cannot fill the disk, and drop the slot
	// (pg_drop_replication_slot) when the application goes away for good.
	// Default: a temporary slot, dropped by the server when the
	// replication connection ends; a broken stream then means a relist.
	PermanentSlot bool
	// Publication names an existing publication to stream, which must
	// include every table (NewTable checks) and, for a partitioned table,
	// have publish_via_partition_root = true. Default: the Source creates
	// its own at the first List (named after the slot for a permanent
	// slot, else randomly), listing the registered tables, and Close drops
	// it unless the slot is permanent.
	Publication string
	// CreatePublication creates Publication at the first List if it does
	// not exist, instead of failing NewSource with "publication ... does
	// not exist". The role must own the tables.
	CreatePublication bool
	// PublishColumnList gives the publication the Source creates a column
	// list (Postgres 15+, temporary slot, REPLICA IDENTITY DEFAULT): only
	// the columns the Tables decode are sent, which saves the walsender
	// and the network the others' bytes on wide tables. Hazard: while the
	// list exists Postgres refuses the application's migrations and
	// writes that conflict with it: DROP COLUMN of a listed column
	// (without CASCADE, which takes the table out of the publication),
	// ALTER COLUMN ... TYPE of a listed column, and, after ALTER TABLE ...
	// REPLICA IDENTITY FULL, every UPDATE and DELETE of the table ("column
	// list used by the publication does not cover the replica identity").
	// Turn it on only where the schema is frozen while the Source runs.
	// Default: every column is published, and the adapter steps over
	// those no Table decodes.
	PublishColumnList bool
	// PublishRowFilter gives the publication the Source creates a row
	// filter (Postgres 15+, temporary slot) with the conditions of the
	// Tables' TableOptions.Where that Postgres may evaluate on UPDATE and
	// DELETE (on replica identity columns): the server sends no change of
	// a row that neither matched before nor matches after. Hazard: while
	// the filter exists Postgres refuses ALTER COLUMN ... TYPE of a
	// column it names ("cannot alter type of a column used by a
	// publication WHERE clause"), DROP COLUMN of it, and UPDATEs and
	// DELETEs of the table once its replica identity no longer covers
	// the filter's columns. Default: no row filter; the Where is evaluated
	// here on every change of the table.
	PublishRowFilter bool
	// Deprecated: every column is published by default now; see
	// PublishColumnList for the opposite. It has no effect.
	PublishAllColumns bool
	// ApplicationName is the application_name of the Source's connections,
	// shown in pg_stat_replication and pg_stat_activity. Default: the
	// program's name and the slot's.
	ApplicationName string
	// StatusInterval is how often the confirmed position is reported to the
	// server even when it did not move. It must stay well below the
	// server's wal_sender_timeout (60s by default). Default 5s.
	StatusInterval time.Duration
	// History is how many acknowledged changes per table stay in memory
	// so that a Watch may start from a version before the newest one a
	// consumer acknowledged. Older starts get driver.ErrExpired and relist.
	// Default 10000; negative keeps none.
	History int
	// Logger receives connection-level events. Default: discard.
	Logger *slog.Logger
	// SnapshotReaders bounds the connections that read tables for Lists,
	// all Lists of the Source together: tables list side by side, and a
	// large table is split into block ranges read at once, every reader
	// inside the same snapshot. Default min(4, GOMAXPROCS); 1 reads one
	// table at a time.
	SnapshotReaders int
	// SyncProgress, when set, is told how far each List has read its
	// table: about once a second while it reads (rows, the planner's
	// estimate, rate and time left), and once when it ends. It is called
	// from the List's goroutine and must not block.
	SyncProgress func(SyncProgress)
}

// Source streams a set of tables over one logical replication slot and one
// walsender. Register every table with NewTable before the first List; each
// table is then its own driver.ListerWatcher, typically run by its own
// informer. Close releases the connections.
type Source struct {
	opts     Options
	log      *slog.Logger
	connCfg  *pgx.ConnConfig
	replCfg  *pgconn.Config
	slot     string
	pub      string
	pubOwned bool // the Source creates (or completes) the publication
	interval time.Duration
	history  int
	// silence is how long a stream may hear nothing from the server
	// before it ends as half-open (see silenceLimit).
	silence time.Duration
	// version is the server's server_version_num as NewSource saw it.
	version int

	setupMu    sync.Mutex      // serialises session setup, snapshot imports and stream starts
	readers    chan struct{}   // a slot per snapshot reader connection (Options.SnapshotReaders)
	readCtx    context.Context // cancelled by Close: ends the Lists under way
	stopReads  context.CancelFunc
	pubCreated bool // this Source created the publication: Close drops it (temporary slot)
	conns      connCache
	guards     sync.WaitGroup // the streams' catalog checks (guard.go)

	// fan owns what lies between the stream and the watches (fanout.go).
	fan *fanout

	mu        sync.Mutex
	tables    []*tableState
	byOID     map[uint32][]*tableState // a table may be registered more than once, with different types
	types     []*pgtype.Type           // derived types (enums, their arrays) the tables use
	frozen    bool                     // a List happened: the table set is fixed
	sess      *session
	resumable bool // a permanent slot's stream ended: resume it, keep the tables
	closed    bool
}

var (
	slotName     = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	maxIdentLen  = 63
	defaultHist  = 10000
	defaultEvery = 5 * time.Second
)

// NewSource parses connString (a pgx connection string, URL or key=value,
// for a role with REPLICATION and SELECT on the tables; never printed:
// errors and logs name host, port and user only), connects once to check
// the server (wal_level, the REPLICATION attribute, the publication when
// one is named) and returns a Source. It does I/O but creates nothing on
// the server: the slot and any publication are created by the first List.
func NewSource(ctx context.Context, connString string, opts Options) (*Source, error) {
	connCfg, err := pgx.ParseConfig(connString)
	if err != nil {
		// The parse error may quote the connection string; never pass it on.
		return nil, errors.New("pginformer: the connection string cannot be parsed (not shown here: it may hold a password)")
	}
	if err := checkOptions(opts); err != nil {
		return nil, err
	}
	s := &Source{
		opts:     opts,
		log:      opts.Logger,
		connCfg:  connCfg,
		slot:     opts.Slot,
		pub:      opts.Publication,
		pubOwned: opts.Publication == "",
		interval: opts.StatusInterval,
		history:  opts.History,
		byOID:    map[uint32][]*tableState{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case s.history == 0:
		s.history = defaultHist
	case s.history < 0:
		s.history = 0
	}
	if s.interval <= 0 {
		s.interval = defaultEvery
	}
	if opts.SnapshotReaders <= 0 {
		opts.SnapshotReaders = min(4, runtime.GOMAXPROCS(0))
	}
	s.readers = make(chan struct{}, opts.SnapshotReaders)
	s.readCtx, s.stopReads = context.WithCancel(context.Background())
	if s.slot == "" {
		s.slot = "dbinformer_" + randomHex(8)
	}
	s.fan = newFanout(s.history, s.slot, s.where())
	if s.pub == "" {
		s.pub = "dbinformer_" + randomHex(8)
		if opts.PermanentSlot {
			// Stable, and kept by Close: the slot decodes its retained
			// WAL with the publication as it was then, so a publication
			// dropped and created again would make that WAL undecodable.
			s.pub = s.slot
		}
	}
	s.configure(connCfg, opts.ApplicationName)
	if err := s.checkServer(ctx, opts.CreatePublication); err != nil {
		return nil, err
	}
	return s, nil
}

// checkOptions refuses options NewSource cannot work with before it does
// any I/O.
func checkOptions(opts Options) error {
	if opts.Slot != "" && !slotName.MatchString(opts.Slot) {
		return fmt.Errorf("pginformer: Options.Slot %q is not a replication slot name: 1 to 63 lowercase letters, digits and underscores", opts.Slot)
	}
	if len(opts.Publication) > maxIdentLen {
		return fmt.Errorf("pginformer: Options.Publication %q is longer than Postgres's 63-byte names", opts.Publication)
	}
	if opts.PermanentSlot && opts.Slot == "" {
		return errors.New("pginformer: Options.PermanentSlot needs Options.Slot: a generated slot name cannot be found again after a restart")
	}
	return nil
}

// configure derives the Source's two connection configurations from the
// parsed connString: the snapshot's normal connections (connCfg, kept as
// s.connCfg) and the replication connections (s.replCfg), both with the
// session parameters and an application name that names the slot.
func (s *Source) configure(connCfg *pgx.ConnConfig, app string) {
	if app == "" {
		app = filepath.Base(os.Args[0]) + " dbinformer " + s.slot
		if len(app) > maxIdentLen {
			app = app[len(app)-maxIdentLen:]
		}
	}
	for k, v := range sessionParams {
		connCfg.RuntimeParams[k] = v
	}
	connCfg.RuntimeParams["application_name"] = app
	// The Source opens replication connections itself; the snapshot
	// connection must be a normal one.
	delete(connCfg.RuntimeParams, "replication")
	s.replCfg = connCfg.Config.Copy()
	s.replCfg.RuntimeParams["replication"] = "database"
	connCfg.BuildFrontend = bufferedFrontend
}

// checkServer connects once to check what the Source needs of the server
// (wal_level, the REPLICATION attribute, a named publication) and records
// the server's version and the stream's silence limit. With createPub a
// missing named publication is the Source's own to create.
func (s *Source) checkServer(ctx context.Context, createPub bool) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer s.release(conn)
	var walLevel string
	var repl, super bool
	var senderTimeout int64 // ms
	err = conn.QueryRow(ctx, `SELECT current_setting('wal_level'), rolreplication, rolsuper, (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'), current_setting('server_version_num')::int FROM pg_roles WHERE rolname = current_user`).Scan(&walLevel, &repl, &super, &senderTimeout, &s.version)
	if err != nil {
		return s.wrap("check server settings", err)
	}
	if walLevel != "logical" {
		return fmt.Errorf("postgres %s: wal_level is %q, logical replication needs wal_level = logical (ALTER SYSTEM SET wal_level = logical; then restart the server)", s.where(), walLevel)
	}
	s.silence = silenceLimit(s.interval, time.Duration(senderTimeout)*time.Millisecond)
	if !repl && !super {
		return fmt.Errorf("postgres %s: role %q lacks the REPLICATION attribute needed for a replication slot (ALTER ROLE %s REPLICATION)", s.where(), s.connCfg.User, pgx.Identifier{s.connCfg.User}.Sanitize())
	}
	if !s.pubOwned {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", s.pub).Scan(&exists); err != nil {
			return s.wrap("look up publication", err)
		}
		switch {
		case !exists && !createPub:
			return fmt.Errorf("postgres %s: publication %q does not exist (create it: CREATE PUBLICATION %s FOR TABLE ... WITH (publish_via_partition_root = true); or set Options.CreatePublication)", s.where(), s.pub, pgx.Identifier{s.pub}.Sanitize())
		case !exists:
			s.pubOwned = true
		}
	}
	return nil
}

// silenceLimit is how long a replication stream may receive nothing at all
// before it is taken for half-open. A live, idle server answers at once the
// keepalive the stream requests after one quiet status interval, so
// silentIntervals intervals would do; but a walsender busy decoding a large
// transaction that sends us nothing (its changes are to other tables)
// reads our requests only once wal_sender_timeout/2 has passed since it
// last did, so the limit is at least that plus two intervals. It stays
// below wal_sender_timeout as long as StatusInterval is below a quarter of
// it, so that a stream cut off in silence ends on our side first. A
// disabled (0) or unknown wal_sender_timeout counts as its default, 60s.
func silenceLimit(interval, senderTimeout time.Duration) time.Duration {
	if senderTimeout <= 0 {
		senderTimeout = time.Minute
	}
	return max(silentIntervals*interval, senderTimeout/2+2*interval)
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

// connect returns a connection: the one the last short query gave back
// (release) if it is still open, else a new one. Close it, or give it back
// with release when only short queries ran on it.
func (s *Source) connect(ctx context.Context) (*pgx.Conn, error) {
	if c := s.conns.take(); c != nil {
		if !c.IsClosed() {
			return c, nil
		}
		c.Close(context.Background())
	}
	c, err := pgx.ConnectConfig(ctx, s.connCfg.Copy())
	if err != nil {
		return nil, s.wrap("connect", err)
	}
	return c, nil
}

// connReadBuffer is the read buffer of a normal connection. pgx reads
// the socket 8 kB at a time, which is one read(2) per 8 kB of a table a
// List copies: when the reader is the slower side (it decodes every row)
// the socket always holds more, and those reads cost a tenth of the
// List's CPU. A larger buffer takes what is there in one read.
const connReadBuffer = 256 << 10

// bufferedFrontend is pgconn's frontend reading through a
// connReadBuffer. The replication connection keeps pgx's own: its
// reads are paced by readBatcher.
func bufferedFrontend(r io.Reader, w io.Writer) *pgproto3.Frontend {
	return pgproto3.NewFrontend(bufio.NewReaderSize(r, connReadBuffer), w)
}

// release gives back a connection that ran short queries only (no
// session setting, no open transaction), for the next connect.
func (s *Source) release(c *pgx.Conn) { s.conns.put(c) }

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
	defer s.release(c)
	var lsn pglogrepl.LSN
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
		return 0, s.wrap("read pg_current_wal_lsn()", err)
	}
	return core.ResourceVersion(lsn), nil
}

// Close stops the stream, closes the connections (a temporary slot goes
// with them) and drops the publication if this Source created it and the
// slot is temporary. Lists and watches then return ErrClosed.
func (s *Source) Close() error {
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.stopReads()
	sess := s.sess
	s.sess = nil
	s.fan.close()
	s.mu.Unlock()
	s.conns.close()
	if sess != nil {
		s.endSession(sess)
	}
	s.guards.Wait()
	if s.pubCreated && !s.opts.PermanentSlot {
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
