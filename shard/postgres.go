package shard

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is a Backend over two tables: <name>_members (a row per live
// replica with an expiry every renewal pushes forward, by the server's
// clock) and <name>_owners (a row per shard: owner, the owner's
// incarnation, term). A member whose expiry passed is gone, whatever its
// TCP connection does; a shard is taken in a transaction that locks the
// previous owner's member row and checks it expired, so that a renewal
// racing the take is either seen or refused. Terms come from the sequence
// <name>_term.
type Postgres struct {
	pool  *pgxpool.Pool
	name  string
	lease atomic.Int64 // the members' lease, ns, as the last Join here gave it
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,40}$`)

// NewPostgres returns the Postgres backend of the replicas that share
// pool's database and name (a lower-case SQL identifier: the prefix of its
// tables), creating the tables if needed. The pool is the caller's; give
// it a statement timeout below the lease if the network can hang. Each
// session also holds a connection of its own, made from the pool's
// configuration, that LISTENs for the other replicas' joins, leaves and
// releases.
func NewPostgres(ctx context.Context, pool *pgxpool.Pool, name string) (*Postgres, error) {
	if pool == nil {
		return nil, errors.New("shard: NewPostgres needs a pgx pool")
	}
	if !identRE.MatchString(name) {
		return nil, fmt.Errorf("shard: NewPostgres: name %q must be a lower-case SQL identifier of at most 41 characters (letters, digits, _)", name)
	}
	p := &Postgres{pool: pool, name: name}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Replicas starting together would race on the catalog.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "dbinformer shard schema "+name); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS %[1]s_members (
	id text PRIMARY KEY,
	weight float8 NOT NULL,
	incarnation bigint NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS %[1]s_owners (
	shard int PRIMARY KEY,
	owner text,
	incarnation bigint,
	term bigint NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS %[1]s_term`, name))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("shard: %s: create the tables: %w", p, err)
	}
	return p, nil
}

func (p *Postgres) String() string {
	return fmt.Sprintf("postgres tables %s_members/%s_owners", p.name, p.name)
}

// Fence checks, inside the caller's transaction tx, that shard is still
// owned under term by a member whose lease is live, and locks that state
// until tx ends: a take of the shard (or the owner's expiry turning into
// a take) waits for tx, so a write in tx after a nil Fence is a write of
// the current owner. It returns an error matching ErrFenced otherwise.
//
// It also sets the transaction's idle_in_transaction_session_timeout to
// the lease: a transaction left idle longer (its process frozen, or a
// handler waiting on something else between statements) is ended by the
// server, which rolls it back and frees the lock, so that it never holds
// the next owner's take for longer than a lease.
func (p *Postgres) Fence(ctx context.Context, tx pgx.Tx, shard int, term uint64) error {
	// The lock would make a frozen owner's open transaction block the
	// next owner's take for as long as the process stays frozen (its
	// connection open, the server waiting for its next command): the
	// transaction may sit idle for a lease at most, then the server ends
	// its session and the lock goes with it.
	idle := time.Duration(p.lease.Load())
	if idle <= 0 {
		idle = defaultLease
	}
	var one int
	err := tx.QueryRow(ctx, fmt.Sprintf(`
SELECT 1, set_config('idle_in_transaction_session_timeout', $3, true)
FROM %[1]s_owners o JOIN %[1]s_members m ON m.id = o.owner AND m.incarnation = o.incarnation
WHERE o.shard = $1 AND o.term = $2 AND m.expires_at > clock_timestamp()
FOR SHARE OF o FOR KEY SHARE OF m`, p.name), shard, int64(term), strconv.FormatInt(idle.Milliseconds(), 10)).Scan(&one, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("shard: %s: shard %d, term %d: %w", p, shard, term, ErrFenced)
	}
	if err != nil {
		return fmt.Errorf("shard: %s: fence shard %d: %w", p, shard, err)
	}
	return nil
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// Join inserts self's member row, or takes over an expired one; a live row
// of the same ID is refused.
func (p *Postgres) Join(ctx context.Context, self Member, ttl time.Duration) (Session, error) {
	if self.ID == "" {
		return nil, fmt.Errorf("shard: %s: empty member ID", p)
	}
	p.lease.Store(int64(ttl))
	var inc int64
	err := p.pool.QueryRow(ctx, fmt.Sprintf(`
INSERT INTO %[1]s_members (id, weight, incarnation, expires_at)
VALUES ($1, $2, nextval('%[1]s_term'), clock_timestamp() + $3 * interval '1 microsecond')
ON CONFLICT (id) DO UPDATE SET weight = EXCLUDED.weight, incarnation = EXCLUDED.incarnation, expires_at = EXCLUDED.expires_at
WHERE %[1]s_members.expires_at <= clock_timestamp()
RETURNING incarnation`, p.name), self.ID, self.Weight, micros(ttl)).Scan(&inc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("shard: %s: join: member %q is held by a live session (another replica with this ID, or this one's last run, whose lease expires within %v)", p, self.ID, ttl)
	}
	if err != nil {
		return nil, fmt.Errorf("shard: %s: join as %q: %w", p, self.ID, err)
	}
	p.notify(ctx)
	return &pgSession{p: p, self: self, inc: inc, ttl: ttl, listener: p.listen(ttl / 3)}, nil
}

type pgSession struct {
	p        *Postgres
	self     Member
	inc      int64
	ttl      time.Duration
	listener *pgListener
}

func (s *pgSession) Changed() <-chan struct{} { return s.listener.changed }

func (s *pgSession) Renew(ctx context.Context) error {
	tag, err := s.p.pool.Exec(ctx, fmt.Sprintf(`
UPDATE %[1]s_members SET expires_at = clock_timestamp() + $3 * interval '1 microsecond'
WHERE id = $1 AND incarnation = $2 AND expires_at > clock_timestamp()`, s.p.name), s.self.ID, s.inc, micros(s.ttl))
	if err != nil {
		return fmt.Errorf("shard: %s: member %q: renew: %w", s.p, s.self.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("shard: %s: member %q (incarnation %d): %w", s.p, s.self.ID, s.inc, ErrSessionLost)
	}
	return nil
}

func (s *pgSession) Members(ctx context.Context) ([]Member, error) {
	rows, err := s.p.pool.Query(ctx, fmt.Sprintf(`SELECT id, weight FROM %s_members WHERE expires_at > clock_timestamp()`, s.p.name))
	if err != nil {
		return nil, fmt.Errorf("shard: %s: read members: %w", s.p, err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) {
		var m Member
		return m, r.Scan(&m.ID, &m.Weight)
	})
	if err != nil {
		return nil, fmt.Errorf("shard: %s: read members: %w", s.p, err)
	}
	return ms, nil
}

// Acquire, in one transaction: make sure the shard's row exists, lock it,
// lock the previous owner's member row (FOR UPDATE: a renewal in flight
// either committed before, and is seen, or waits and then finds its row
// expired), check this member is live, and take the shard under a new
// term.
func (s *pgSession) Acquire(ctx context.Context, shard int) (term uint64, ok bool, err error) {
	n := s.p.name
	err = pgx.BeginFunc(ctx, s.p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s_owners (shard, term) VALUES ($1, 0) ON CONFLICT DO NOTHING`, n), shard); err != nil {
			return err
		}
		var owner *string
		var inc *int64
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT owner, incarnation FROM %s_owners WHERE shard = $1 FOR UPDATE`, n), shard).Scan(&owner, &inc); err != nil {
			return err
		}
		if owner != nil && !(*owner == s.self.ID && *inc == s.inc) {
			var live bool
			err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT expires_at > clock_timestamp() FROM %s_members WHERE id = $1 AND incarnation = $2 FOR UPDATE`, n), *owner, *inc).Scan(&live)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if live {
				return nil
			}
		}
		var me bool
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s_members WHERE id = $1 AND incarnation = $2 AND expires_at > clock_timestamp() FOR KEY SHARE)`, n), s.self.ID, s.inc).Scan(&me); err != nil {
			return err
		}
		if !me {
			return ErrSessionLost
		}
		var t int64
		if err := tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %[1]s_owners SET owner = $2, incarnation = $3, term = nextval('%[1]s_term') WHERE shard = $1 RETURNING term`, n), shard, s.self.ID, s.inc).Scan(&t); err != nil {
			return err
		}
		term, ok = uint64(t), true
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("shard: %s: member %q: acquire shard %d: %w", s.p, s.self.ID, shard, err)
	}
	return term, ok, nil
}

func (s *pgSession) Release(ctx context.Context, shard int, term uint64) error {
	// The NOTIFY only when the release took the shard.
	_, err := s.p.pool.Exec(ctx, fmt.Sprintf(`
WITH r AS (UPDATE %s_owners SET owner = NULL, incarnation = NULL WHERE shard = $1 AND term = $2 RETURNING 1)
SELECT pg_notify($3, '') FROM r`, s.p.name), shard, int64(term), s.p.channel())
	if err != nil {
		return fmt.Errorf("shard: %s: member %q: release shard %d (term %d): %w", s.p, s.self.ID, shard, term, err)
	}
	return nil
}

// Close releases every shard of this incarnation and deletes its member
// row.
func (s *pgSession) Close(ctx context.Context) error {
	s.listener.stop()
	err := pgx.BeginFunc(ctx, s.p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s_owners SET owner = NULL, incarnation = NULL WHERE owner = $1 AND incarnation = $2`, s.p.name), s.self.ID, s.inc); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s_members WHERE id = $1 AND incarnation = $2`, s.p.name), s.self.ID, s.inc)
		return err
	})
	if err != nil {
		return fmt.Errorf("shard: %s: member %q: leave (its row expires on its own): %w", s.p, s.self.ID, err)
	}
	s.p.notify(ctx)
	return nil
}
