package shard_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
	"github.com/dbinformer/dbinformer/shard"
)

// pgPool opens a pool on pg, through a proxy when px is not nil.
func pgPool(t *testing.T, pg *harness.Postgres, px *proxy.Proxy) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(pg.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	if px != nil {
		cfg.ConnConfig.Port = uint16(px.Port())
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func pgBackend(t *testing.T, pool *pgxpool.Pool, name string) *shard.Postgres {
	b, err := shard.NewPostgres(context.Background(), pool, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPostgresMembershipAssignmentFencing(t *testing.T) {
	pg := harness.StartPostgres(t)
	pool := pgPool(t, pg, nil)
	b := pgBackend(t, pool, "test_shards")
	const shards = 32
	opts := func(id string) shard.Options { return shard.Options{ID: id, Shards: shards, Lease: lease} }
	a, bb, c := start(t, b, opts("a")), start(t, b, opts("b")), start(t, b, opts("c"))
	before := settled(t, shards, a, bb, c)
	d := start(t, b, opts("d"))
	after := settled(t, shards, a, bb, c, d)
	moved := 0
	for s := range after {
		if after[s] != before[s] {
			moved++
			if after[s] != "d" {
				t.Fatalf("shard %d moved from %s to %s when d joined", s, before[s], after[s])
			}
		}
	}
	if moved == 0 {
		t.Fatal("d joined and won no shard")
	}

	ctx := context.Background()
	sh := slices.Min(slices.Collect(maps.Keys(d.s.Owned())))
	term := d.s.Owned()[sh]
	write := func(term uint64) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := b.Fence(ctx, tx, sh, term); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT 1")
			return err
		})
	}
	if err := write(term); err != nil {
		t.Fatalf("a write under the current term %d of shard %d: %v", term, sh, err)
	}
	d.stop(t)
	back := settled(t, shards, a, bb, c)
	for s := range back {
		if back[s] != before[s] {
			t.Fatalf("shard %d is %s's after d left, was %s's before d joined", s, back[s], before[s])
		}
	}
	if err := write(term); !errors.Is(err, shard.ErrFenced) {
		t.Fatalf("a write of deposed owner d under term %d of shard %d: %v, want ErrFenced", term, sh, err)
	}
}

// A member whose Postgres connection freezes (TCP open) leaves within its
// lease: its row expires by the server's clock.
func TestPostgresFrozenMemberLeaves(t *testing.T) {
	pg := harness.StartPostgres(t)
	b := pgBackend(t, pgPool(t, pg, nil), "test_shards")
	px, err := proxy.New("127.0.0.1:" + strconv.Itoa(pg.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	fpool := pgPool(t, pg, px)
	fb := pgBackend(t, fpool, "test_shards")
	const shards = 16
	opts := func(id string) shard.Options { return shard.Options{ID: id, Shards: shards, Lease: lease} }
	a, bb := start(t, b, opts("a")), start(t, b, opts("b"))
	f := start(t, fb, opts("f"))
	settled(t, shards, a, bb, f)
	// Frozen inside a fenced transaction, as a process stopped in its
	// handler: the lock Fence took must not hold the take past the lease.
	var fencedShard int
	var fencedTerm uint64
	for sh, term := range f.s.Owned() {
		fencedShard, fencedTerm = sh, term
		break
	}
	ctx := context.Background()
	tx, err := fpool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := fb.Fence(ctx, tx, fencedShard, fencedTerm); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	px.Freeze()
	settled(t, shards, a, bb)
	t.Logf("the frozen member's shards moved %v after the freeze (lease %v)", time.Since(frozenAt), lease)
	// Owned applies Begin's check: the frozen member hands out no work
	// (two thirds into its lease it stopped).
	if owned := f.s.Owned(); len(owned) != 0 {
		t.Fatalf("the frozen member still hands out work for shards %v", owned)
	}
	px.Thaw()
	if err := tx.Commit(ctx); err == nil {
		t.Error("the frozen member's fenced transaction committed after its shard moved")
	}
	settled(t, shards, a, bb, f)
}

// A graceful change — a member joins, a shard is released, a member
// leaves — wakes the other sessions at once (Changed), rather than on
// their next periodic look a third of the lease later.
func TestPostgresChangedSignals(t *testing.T) {
	pg := harness.StartPostgres(t)
	// Once when its connection listens, then once per NOTIFY.
	changedSignals(t, pgBackend(t, pgPool(t, pg, nil), "changed_shards"), "listening")
}
