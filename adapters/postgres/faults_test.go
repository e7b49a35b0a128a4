package pginformer_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pgx/v5"
)

// countingLW counts Lists, to tell a resume from a relist.
type countingLW[T any] struct {
	driver.ListerWatcher[T]
	lists atomic.Int32
}

func (c *countingLW[T]) List(ctx context.Context, opts driver.ListSink[T]) (core.ResourceVersion, error) {
	c.lists.Add(1)
	return c.ListerWatcher.List(ctx, opts)
}

// orderChecker fails the test when a handler sees a key's version go
// backwards. Values are decimal version numbers.
type orderChecker struct {
	t    *testing.T
	mu   sync.Mutex
	last map[string]int
}

func (o *orderChecker) see(key, v string) {
	n, _ := strconv.Atoi(v)
	o.mu.Lock()
	defer o.mu.Unlock()
	if prev, ok := o.last[key]; ok && n < prev {
		o.t.Errorf("key %s went back from version %d to %d", key, prev, n)
	}
	o.last[key] = n
}

func (o *orderChecker) handler() core.ResourceEventHandler[kv] {
	return core.ResourceEventHandlerFuncs[kv]{
		AddFunc:    func(key string, obj kv, _ bool) { o.see(key, obj.V) },
		UpdateFunc: func(key string, _, obj kv) { o.see(key, obj.V) },
		DeleteFunc: func(key string, _ kv, _ bool) {
			o.mu.Lock()
			delete(o.last, key)
			o.mu.Unlock()
		},
	}
}

// writeRound bumps the version of keys 1..20 and deletes/recreates one.
func writeRound(t *testing.T, pg *harness.Postgres, round int) core.ResourceVersion {
	conn := pg.Conn(t)
	write(t, conn, fmt.Sprintf("INSERT INTO kv SELECT g, '%d' FROM generate_series(1, 20) g ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", round))
	return write(t, conn, fmt.Sprintf("DELETE FROM kv WHERE id = %d", round%20+1))
}

func TestServerRestart(t *testing.T) {
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) {
			pg := harness.StartPostgres(t)
			pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL)`)
			src := newSource(t, pg, pginformer.Options{})
			oc := &orderChecker{t: t, last: map[string]int{}}
			inf, _ := informer[kv](t, newTable[kv](t, src, "kv"), oc.handler())
			waitFor(t, inf, writeRound(t, pg, 1))
			// A writer keeps committing while the server goes down and up.
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for round := 100; ; round++ {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					if c, err := pgx.Connect(ctx, pg.ConnString()); err == nil {
						c.Exec(ctx, fmt.Sprintf("INSERT INTO kv SELECT g, '%d' FROM generate_series(1, 20) g ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", round))
						c.Close(ctx)
					}
					cancel()
				}
			}()
			time.Sleep(300 * time.Millisecond)
			pg.Restart(t, mode)
			time.Sleep(300 * time.Millisecond)
			close(stop)
			<-done
			writeRound(t, pg, 100000)
			rv := writeRound(t, pg, 100001)
			waitFor(t, inf, rv)
			eventually(t, "cache converges after restart", func() error { return cacheMatches(t, pg.Conn(t), "kv", inf) })
		})
	}
}

func TestWalsenderTerminated(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL)`)
	src := newSource(t, pg, pginformer.Options{})
	oc := &orderChecker{t: t, last: map[string]int{}}
	inf, _ := informer[kv](t, newTable[kv](t, src, "kv"), oc.handler())
	conn := pg.Conn(t)
	waitFor(t, inf, writeRound(t, pg, 1))
	var n int
	if err := conn.QueryRow(ctxFor(t), "SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1", src.SlotName()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminate walsender: %d, %v", n, err)
	}
	writeRound(t, pg, 2)
	waitFor(t, inf, writeRound(t, pg, 3))
	eventually(t, "cache converges after the walsender was terminated", func() error { return cacheMatches(t, conn, "kv", inf) })
}

// TestPermanentSlotResumes: with a permanent slot, a crash of the server
// (immediate shutdown) and a killed walsender are resumed from the slot
// without a relist.
func TestPermanentSlotResumes(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL)`)
	src := newSource(t, pg, pginformer.Options{PermanentSlot: true, Slot: "perm"})
	lw := &countingLW[kv]{ListerWatcher: newTable[kv](t, src, "kv")}
	oc := &orderChecker{t: t, last: map[string]int{}}
	inf, _ := informer[kv](t, lw, oc.handler())
	waitFor(t, inf, writeRound(t, pg, 1))
	pg.Restart(t, "immediate")
	writeRound(t, pg, 2)
	waitFor(t, inf, writeRound(t, pg, 3))
	conn := pg.Conn(t)
	eventually(t, "walsender is back", func() error {
		var n int
		if err := conn.QueryRow(ctxFor(t), "SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = 'perm'").Scan(&n); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("no active walsender")
		}
		return nil
	})
	waitFor(t, inf, writeRound(t, pg, 4))
	if err := cacheMatches(t, conn, "kv", inf); err != nil {
		t.Error(err)
	}
	if n := lw.lists.Load(); n != 1 {
		t.Errorf("%d Lists, want 1: the permanent slot should resume without a relist", n)
	}
}

// TestPermanentSlotDroppedWhileDown: the slot is dropped while the stream
// is down; the source notices, recreates it and the informer relists.
func TestPermanentSlotDroppedWhileDown(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL)`)
	src := newSource(t, pg, pginformer.Options{PermanentSlot: true, Slot: "perm"})
	lw := &countingLW[kv]{ListerWatcher: newTable[kv](t, src, "kv")}
	inf, _ := informer[kv](t, lw, nil)
	waitFor(t, inf, writeRound(t, pg, 1))
	conn := pg.Conn(t)
	// Kill the walsender and drop the slot before the source gets it back.
	ctx := ctxFor(t)
	for {
		var dropped bool
		err := conn.QueryRow(ctx, `SELECT pg_terminate_backend(active_pid) IS NOT NULL FROM pg_replication_slots WHERE slot_name = 'perm'`).Scan(&dropped)
		if err == pgx.ErrNoRows {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		conn.Exec(ctx, `SELECT pg_drop_replication_slot('perm') FROM pg_replication_slots WHERE slot_name = 'perm' AND active_pid IS NULL`)
	}
	writeRound(t, pg, 2)
	waitFor(t, inf, writeRound(t, pg, 3))
	eventually(t, "cache converges after the slot was dropped", func() error { return cacheMatches(t, conn, "kv", inf) })
	if n := lw.lists.Load(); n < 2 {
		t.Errorf("%d Lists: a dropped slot must make the informer relist", n)
	}
	// And a second Source on the same permanent slot name starts fine
	// after this one is closed, resuming the existing slot.
	src.Close()
	src2 := newSource(t, pg, pginformer.Options{PermanentSlot: true, Slot: "perm"})
	inf2, _ := informer[kv](t, newTable[kv](t, src2, "kv"), nil)
	waitFor(t, inf2, writeRound(t, pg, 4))
	if err := cacheMatches(t, conn, "kv", inf2); err != nil {
		t.Error(err)
	}
}

// The first List of a session reads in the slot's exported snapshot, which
// lives only as long as the replication connection that exported it. A
// server restart ends that connection while nothing is read on it; the
// next table's List then finds the snapshot gone ("invalid snapshot
// identifier") and must start over with a new session at once, not retry
// the dead snapshot until the hold ends (30s: a reliability seed converged
// in 30s instead of 0.5s).
func TestSnapshotGoneWithServer(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE snap_a (id bigint PRIMARY KEY, v text NOT NULL); INSERT INTO snap_a VALUES (1, 'a');
		CREATE TABLE snap_b (id bigint PRIMARY KEY, v text NOT NULL); INSERT INTO snap_b VALUES (2, 'b')`)
	src := newSource(t, pg, pginformer.Options{})
	a, b := newTable[kv](t, src, "snap_a"), newTable[kv](t, src, "snap_b")
	ctx := ctxFor(t)
	list := func(tbl *pginformer.Table[kv]) (int, error) {
		n := 0
		_, err := tbl.List(ctx, driver.ListSink[kv]{Emit: func(ev driver.Event[kv]) error {
			if ev.Err != nil {
				return ev.Err
			}
			n++
			return nil
		}})
		return n, err
	}
	// a lists in the slot's snapshot, which is held for b (the stream
	// starts once every table has listed).
	if n, err := list(a); err != nil || n != 1 {
		t.Fatalf("List(snap_a) = %d rows, %v", n, err)
	}
	pg.Stop(t, "fast")
	pg.Start(t)
	n, err := list(b)
	if err != nil {
		t.Logf("first List(snap_b) after the restart: %v", err)
		if !strings.Contains(err.Error(), "snapshot") {
			t.Errorf("first List(snap_b) after the restart failed with %v, want the gone snapshot named", err)
		}
		n, err = list(b)
	}
	if err != nil || n != 1 {
		t.Fatalf("List(snap_b) after the restart = %d rows, %v; want 1 row (a new session, not the dead snapshot)", n, err)
	}
	if n, err := list(a); err != nil || n != 1 {
		t.Fatalf("List(snap_a) in the new session = %d rows, %v", n, err)
	}
}
