package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresOptions configures a Postgres advisory-lock election.
type PostgresOptions struct {
	// Identity names this candidate (set as the lock connection's
	// application_name, so pg_stat_activity shows who leads); empty means
	// a random one.
	Identity string
	// Lease is the deadline of a term: a leader that has not shown itself
	// to the server for this long — frozen (SIGSTOP, a stalled VM), cut
	// off by the network, its connection half-open — is deposed by the
	// server, and another candidate leads right after. The election
	// connection runs with idle_session_timeout set to Lease, so the
	// server ends a session that sent nothing for that long, and with it
	// the advisory lock; the leader checks its connection every Check
	// (below Lease), and gives the leadership up itself once Lease has
	// passed since its last successful check, so that a leader that
	// resumes after a freeze stops at once. Zero means 5s; below one
	// second is refused (idle_session_timeout counts milliseconds, but a
	// lease shorter than a network hiccup deposes healthy leaders).
	// idle_session_timeout needs Postgres 14; on an older server the
	// election says so in its log and a frozen leader is deposed only
	// when its connection dies.
	Lease time.Duration
	// Check is how often a leader checks its lock connection, and how
	// often a candidate tries the lock. A leader whose connection died (a
	// server restart, pg_terminate_backend, a cut network) loses its lead
	// context within about two Check periods; another candidate may hold
	// the lock before that, which is what Term.Epoch is for. Zero means
	// 1s, or a third of Lease if that is less; it must be below Lease.
	Check time.Duration
	// Logger receives election errors and transitions; nil discards them.
	Logger *slog.Logger
}

// Postgres is an Elector over a session-level advisory lock held on a
// dedicated connection: the lock is the leadership, and it is gone when the
// connection is. The connection's idle_session_timeout is the lease (see
// PostgresOptions.Lease): a held connection alone does not keep a leader
// that stopped checking it.
//
// Why idle_session_timeout rather than a lease row with an expiry: the
// server's own timer ends the frozen leader's session, which releases the
// lock at once, so the lock alone still decides who leads (no second
// source of truth to reconcile, no clock but the server's, no table to
// create: any role may run it); and the deposed leader's session is gone,
// so whatever it held with it goes too.
type Postgres struct {
	connString string
	name       string
	opts       PostgresOptions
}

// NewPostgres returns an election among the candidates that use the same
// database and lock name. connString is a pgx connection string; the
// election opens its own connection per term (never from a pool, whose
// connections come and go).
func NewPostgres(connString, name string, opts PostgresOptions) (*Postgres, error) {
	if name == "" {
		return nil, errors.New("leader: NewPostgres needs a lock name")
	}
	if _, err := pgx.ParseConfig(connString); err != nil {
		// pgx's parse errors do not repeat the password.
		return nil, fmt.Errorf("leader: postgres election %q: connection string: %w", name, err)
	}
	if opts.Lease == 0 {
		opts.Lease = DefaultLease
	}
	if opts.Lease < time.Second {
		return nil, fmt.Errorf("leader: postgres election %q: PostgresOptions.Lease %v is below one second", name, opts.Lease)
	}
	if opts.Check <= 0 {
		opts.Check = min(time.Second, opts.Lease/3)
	}
	if opts.Check >= opts.Lease {
		return nil, fmt.Errorf("leader: postgres election %q: PostgresOptions.Check %v must be below Lease %v (the server deposes a leader that sends nothing for Lease)", name, opts.Check, opts.Lease)
	}
	if opts.Identity == "" {
		opts.Identity = randomIdentity()
	}
	return &Postgres{connString: connString, name: name, opts: opts}, nil
}

// Run: see Elector.
func (p *Postgres) Run(ctx context.Context, lead func(context.Context, Term) error) error {
	return run(ctx, p, p.opts.Logger, lead)
}

func (p *Postgres) what() string { return fmt.Sprintf("postgres advisory lock %q", p.name) }

func (p *Postgres) campaign(ctx context.Context) (*held, error) {
	cfg, err := pgx.ParseConfig(p.connString)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "dbinformer-leader " + p.opts.Identity
	conn, err := p.connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	closeConn := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}
	for {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", p.name).Scan(&ok); err != nil {
			closeConn()
			return nil, fmt.Errorf("try the lock: %w", err)
		}
		if ok {
			break
		}
		t := time.NewTimer(p.opts.Check)
		select {
		case <-ctx.Done():
			t.Stop()
			closeConn()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	// A transaction id is a number every later term reads higher.
	var epoch int64
	if err := conn.QueryRow(ctx, "SELECT txid_current()").Scan(&epoch); err != nil {
		closeConn()
		return nil, fmt.Errorf("read the epoch: %w", err)
	}
	lost := make(chan struct{})
	stop := make(chan struct{})
	watched := make(chan struct{})
	shown := time.Now() // the last time the server heard from this leader, as far as it knows
	go func() {
		defer close(watched)
		t := time.NewTicker(p.opts.Check)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if since := time.Since(shown); since >= p.opts.Lease {
				// Frozen, or starved, past the lease: the server has
				// deposed this leader (or will before it could tell).
				p.warn("leader lease expired before it could be renewed (was the process frozen?); giving up the leadership", "since", since.Round(time.Millisecond))
				close(lost)
				return
			}
			sent := time.Now()
			pctx, cancel := context.WithTimeout(context.Background(), min(p.opts.Check, p.opts.Lease-time.Since(shown)))
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				p.warn("leader lock connection lost", "err", err)
				close(lost)
				return
			}
			shown = sent
		}
	}()
	return &held{
		term: Term{Epoch: uint64(epoch), Identity: p.opts.Identity},
		lost: lost,
		resign: func() {
			close(stop)
			<-watched
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, _ = conn.Exec(rctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", p.name)
			closeConn()
		},
	}, nil
}

// DefaultLease is the lease of every election whose options leave it zero
// (PostgresOptions.Lease, EtcdOptions.TTL, KubeOptions.LeaseDuration): a
// frozen or cut-off leader is deposed about this long after it was last
// heard from.
const DefaultLease = 5 * time.Second

// connect opens the election connection with idle_session_timeout set to
// the lease; a server without it (before Postgres 14) is used without,
// and the log says what that costs.
func (p *Postgres) connect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	cfg.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(p.opts.Lease.Milliseconds(), 10)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil && strings.Contains(err.Error(), "idle_session_timeout") {
		p.warn("the server has no idle_session_timeout (Postgres 14 and later): a frozen or cut-off leader is deposed only when its connection dies, not within PostgresOptions.Lease", "err", err)
		delete(cfg.RuntimeParams, "idle_session_timeout")
		conn, err = pgx.ConnectConfig(ctx, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

func (p *Postgres) warn(msg string, args ...any) {
	if p.opts.Logger != nil {
		p.opts.Logger.Warn(msg, append([]any{"election", p.what()}, args...)...)
	}
}
