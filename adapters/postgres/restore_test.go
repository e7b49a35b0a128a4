package pginformer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pgx/v5"
)

// Restore starts the slot's stream once the last checkpointing table of
// the Source has restored, without waiting for a Watch: an informer
// restores as soon as its checkpoint's header is read, so the stream's
// start and the server's keepalive overlap the decoding, and the first
// watch finds the head reached. Before any Watch the stream's position
// reaches the server's head; the watch from the checkpoint's version then
// delivers the change made while no process ran, and a Bookmark at the
// head, without asking for progress.
func TestRestoreStartsTheStream(t *testing.T) {
	pg := harness.StartPostgres(t)
	table := fmt.Sprintf("warm_%d", seqNo())
	ident := pgx.Identifier{table}.Sanitize()
	pg.Exec(t, "CREATE TABLE "+ident+" (id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL)")
	conn := pg.Conn(t)
	write(t, conn, "INSERT INTO "+ident+" SELECT g, 1, 'n' || g FROM generate_series(1, 10) g")
	opts := pginformer.Options{PermanentSlot: true, Slot: "early_" + table}

	// The first process lists (creating the permanent slot) and ends
	// without acknowledging anything: the slot stays at the list's version.
	src1 := newSource(t, pg, opts)
	tbl1 := newTable[vrow](t, src1, table)
	tbl1.GateAcknowledgements(true)
	rv, err := tbl1.List(ctxFor(t), driver.ListSink[vrow]{Emit: func(driver.Event[vrow]) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	src1.Close()

	write(t, conn, "UPDATE "+ident+" SET v = 2 WHERE id = 3")
	head := currentLSN(t, conn)

	src2 := newSource(t, pg, opts)
	tbl2 := newTable[vrow](t, src2, table)
	tbl2.GateAcknowledgements(true)
	if pos, streaming := pginformer.StreamPosition(src2); streaming {
		t.Fatalf("the stream runs (at %d) before any Restore or Watch", pos)
	}
	if err := tbl2.Restore(ctxFor(t), rv, func(func(string, vrow) bool) {}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	informertest.Eventually(t, "the stream started by Restore at the head", func() bool {
		pos, streaming := pginformer.StreamPosition(src2)
		return streaming && pos >= uint64(head)
	})

	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- tbl2.Watch(ctx, rv, driver.WatchOptions[vrow]{Fills: true, Emit: func(evs []driver.Event[vrow]) error {
			for _, ev := range evs {
				switch ev.Type {
				case driver.Bookmark:
					if ev.RV >= head {
						cancel()
					}
				default:
					got = append(got, fmt.Sprintf("%s %s", ev.Type, ev.Key))
				}
			}
			return nil
		}})
	}()
	if err := <-done; !errors.Is(err, driver.ErrWatchStopped) {
		t.Fatalf("Watch: %v", err)
	}
	if len(got) != 1 || got[0] != fmt.Sprintf("%s 3", driver.Modified) {
		t.Errorf("the watch from the checkpoint delivered %q, want the one update", got)
	}
}
