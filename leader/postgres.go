package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresOptions configures a Postgres advisory-lock election.
type PostgresOptions struct {
	// Identity names this candidate (set as the lock connection's
	// application_name, so pg_stat_activity shows who leads); empty means
	// a random one.
	Identity string
	// Check is how often a leader checks its lock connection, and how
	// often a candidate tries the lock. A leader whose connection died (a
	// server restart, pg_terminate_backend, a cut network) loses its lead
	// context within about two Check periods; another candidate may hold
	// the lock before that, which is what Term.Epoch is for. Zero means
	// 1s.
	Check time.Duration
	// Logger receives election errors and transitions; nil discards them.
	Logger *slog.Logger
}

// Postgres is an Elector over a session-level advisory lock held on a
// dedicated connection: the lock is the leadership, and it is gone when the
// connection is.
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
	if opts.Check <= 0 {
		opts.Check = time.Second
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
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
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
			pctx, cancel := context.WithTimeout(context.Background(), p.opts.Check)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				if p.opts.Logger != nil {
					p.opts.Logger.Warn("leader lock connection lost", "election", p.what(), "err", err)
				}
				close(lost)
				return
			}
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
