package bench_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// pgRow is a typical narrow row: a key, two short texts, an int and a
// 32-character note.
type pgRow struct {
	ID   int64  `db:"id"`
	Org  string `db:"org"`
	Team string `db:"team"`
	N    int32  `db:"n"`
	Note string `db:"note"`
}

const pgRowCols = "id bigint PRIMARY KEY, org text NOT NULL, team text NOT NULL, n int NOT NULL, note text NOT NULL"

// pgRowsFrom is a SELECT producing pgRow values for ids lo..hi.
func pgRowsFrom(lo, hi int) string {
	return "SELECT g, 'org-' || (g % 100), 'team-' || (g % 1000), g % 1000000, md5(g::text) FROM generate_series(" +
		strconv.Itoa(lo) + ", " + strconv.Itoa(hi) + ") g"
}

// streamRow is the streaming workload's row: batch says which writer
// transaction wrote it, so the handler can tell its commit time.
type streamRow struct {
	ID    int64  `db:"id"`
	Batch int64  `db:"batch"`
	V     string `db:"v"`
}

func newPGTable[T any](b *testing.B, pg *harness.Postgres, table string) (*pginformer.Source, *pginformer.Table[T]) {
	b.Helper()
	src, err := pginformer.NewSource(context.Background(), pg.ConnString(), pginformer.Options{})
	if err != nil {
		b.Fatal(err)
	}
	tbl, err := pginformer.NewTable[T](context.Background(), src, table, pginformer.TableOptions[T]{})
	if err != nil {
		src.Close()
		b.Fatal(err)
	}
	return src, tbl
}

// BenchmarkPostgres runs every Postgres row on one server:
//   - InitialSync: our List of a 1,000,000-row table (fresh Source: slot,
//     exported snapshot, rows decoded into structs) against a raw
//     COPY (SELECT …) TO STDOUT of the same rows read with pgx and thrown
//     away, the floor; alternating, 3 rounds, medians.
//   - Streaming: 4 writer connections upsert transactions of 100 rows into
//     disjoint key ranges for 10s while an informer follows, as fast as
//     they can (max) and at a steady 20,000 rows/s in all (paced);
//     committed vs applied rows/s and the lag to the handler from each
//     transaction's commit returning to its writer (a lower bound) and
//     from its being sent (an upper bound), p50 and p99.
//     Streaming/max/bare runs the same unpaced writers with a bare
//     pglogrepl receive loop following instead: how much of the unpaced
//     writers' rate any pgoutput consumer keeps up with on this machine.
//     On 2 cores that row measures how the CPU is split between the
//     writers, the walsender and the consumer more than the consumer:
//     a consumer that spends less CPU lets the writers commit more, and
//     the walsender, not the consumer, falls behind.
//   - Streaming/backlog: the walsender is held (SIGSTOP) while the
//     writers commit 400,000 row changes, then let go; the rate at which
//     the follower gets through the backlog, ours against the bare
//     receive loop, with the walsender's and the process's CPU. No
//     writer competes for the CPU: what it measures is whether the
//     follower keeps up with what Postgres can send.
//   - Decode: one 200,000-row transaction, from its commit to the last
//     row: our Watch (decoded into structs) against a bare pglogrepl
//     receive loop that decodes nothing, the floor; both have the
//     replication stream open before the write; alternating, 3 rounds.
func BenchmarkPostgres(b *testing.B) {
	pg := harness.StartPostgres(b)
	rows := size(1_000_000, 10_000)
	pg.Exec(b, "CREATE TABLE sync_rows ("+pgRowCols+"); INSERT INTO sync_rows "+pgRowsFrom(1, rows))
	pg.Exec(b, "VACUUM ANALYZE sync_rows")
	ctx := context.Background()

	rounds := size(3, 1)
	b.Run("InitialSync", func(b *testing.B) {
		conn := pg.Conn(b)
		copyAll := func() {
			res, err := conn.PgConn().CopyTo(ctx, io.Discard, "COPY (SELECT id, org, team, n, note FROM sync_rows) TO STDOUT")
			if err != nil {
				b.Fatal(err)
			}
			if res.RowsAffected() != int64(rows) {
				b.Fatalf("copied %d rows, want %d", res.RowsAffected(), rows)
			}
		}
		copyAll() // warm the buffer cache for both sides
		var (
			src    *pginformer.Source
			tbl    *pginformer.Table[pgRow]
			listed int
		)
		ours := side{name: "ours", n: rows, unit: "row",
			prepare: func() { src, tbl = newPGTable[pgRow](b, pg, "sync_rows") },
			run: func() {
				listed = 0
				if _, err := tbl.List(ctx, driver.ListSink[pgRow]{Emit: func(ev driver.Event[pgRow]) error {
					if ev.Err != nil {
						return ev.Err
					}
					listed++
					return nil
				}}); err != nil {
					b.Fatal(err)
				}
			},
			finish: func() {
				src.Close()
				// Let the next round's GC drop this Source's state.
				src, tbl = nil, nil
				if listed != rows {
					b.Fatalf("listed %d rows, want %d", listed, rows)
				}
			}}
		alternate(b, rounds, ours, side{name: "copy", n: rows, unit: "row", run: copyAll})
	})

	pg.Exec(b, "CREATE TABLE stream_rows (id bigint PRIMARY KEY, batch bigint NOT NULL, v text NOT NULL)")
	pg.Exec(b, "CREATE PUBLICATION bench_stream FOR TABLE stream_rows")
	// Unpaced, the writers saturate the machine: does the cache keep up
	// with the most Postgres commits here? Paced at a steady 20,000 rows/s,
	// the lag is the pipeline's, not a queue behind a saturated CPU.
	b.Run("Streaming/max/ours", func(b *testing.B) {
		for range b.N {
			pgStreaming(b, pg, time.Duration(size(10, 1))*time.Second, 0, false)
		}
	})
	// The floor under the same writers: what a consumer that decodes
	// nothing keeps up with (the walsender's pace on this machine).
	b.Run("Streaming/max/bare", func(b *testing.B) {
		for range b.N {
			pgStreaming(b, pg, time.Duration(size(10, 1))*time.Second, 0, true)
		}
	})
	b.Run("Streaming/paced/ours", func(b *testing.B) {
		for range b.N {
			pgStreaming(b, pg, time.Duration(size(10, 1))*time.Second, 20_000, false)
		}
	})
	backlog := size(400_000, 10_000)
	b.Run("Streaming/backlog/ours", func(b *testing.B) {
		for range b.N {
			pgBacklog(b, pg, backlog, false)
		}
	})
	b.Run("Streaming/backlog/bare", func(b *testing.B) {
		for range b.N {
			pgBacklog(b, pg, backlog, true)
		}
	})

	decodeRows := size(200_000, 5_000)
	pg.Exec(b, "CREATE TABLE decode_rows ("+pgRowCols+")")
	pg.Exec(b, "CREATE PUBLICATION bench_bare FOR TABLE decode_rows")
	// Blocks of keys count across the runs of -count, which call the
	// sub-benchmark again on the same table.
	block := 0
	b.Run("Decode", func(b *testing.B) {
		insert := func() {
			lo := 1 + block*decodeRows
			block++
			pg.Exec(b, "INSERT INTO decode_rows "+pgRowsFrom(lo, lo+decodeRows-1))
		}
		var (
			src  *pginformer.Source
			tbl  *pginformer.Table[pgRow]
			from core.ResourceVersion
		)
		ours := side{name: "ours", n: decodeRows, unit: "row",
			prepare: func() {
				src, tbl = newPGTable[pgRow](b, pg, "decode_rows")
				var err error
				if from, err = tbl.List(ctx, driver.ListSink[pgRow]{Emit: func(driver.Event[pgRow]) error { return nil }}); err != nil {
					b.Fatal(err)
				}
				insert()
			},
			run: func() {
				// The watch decodes the transaction into structs; it ends
				// once every row of it was emitted.
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				n := 0
				errDone := errors.New("done")
				err := tbl.Watch(wctx, from, driver.WatchOptions[pgRow]{Emit: func(batch []driver.Event[pgRow]) error {
					for _, ev := range batch {
						if ev.Err != nil {
							return ev.Err
						}
						if ev.Type == driver.Added {
							n++
						}
					}
					if n >= decodeRows {
						return errDone
					}
					return nil
				}})
				if !errors.Is(err, errDone) {
					b.Fatal(err)
				}
			},
			finish: func() { src.Close(); src, tbl = nil, nil }}
		var (
			repl  *pgconn.PgConn
			start pglogrepl.LSN
		)
		bare := side{name: "bare", n: decodeRows, unit: "row",
			prepare: func() {
				var err error
				if repl, err = pgconn.Connect(ctx, pg.ReplicationConnString()); err != nil {
					b.Fatal(err)
				}
				slot := "bench_bare_" + strconv.Itoa(block)
				res, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true})
				if err != nil {
					b.Fatal(err)
				}
				if start, err = pglogrepl.ParseLSN(res.ConsistentPoint); err != nil {
					b.Fatal(err)
				}
				if err := pglogrepl.StartReplication(ctx, repl, slot, start, pglogrepl.StartReplicationOptions{
					PluginArgs: []string{"proto_version '1'", "publication_names 'bench_bare'"},
				}); err != nil {
					b.Fatal(err)
				}
				insert()
			},
			run:    func() { bareReceive(b, repl, start, decodeRows) },
			finish: func() { repl.Close(ctx) }}
		alternate(b, rounds, ours, bare)
	})
}

// bareReceive reads the replication stream until it has seen want insert
// messages and the commit after them, looking at one byte per message and
// answering keepalives: the least any pgoutput consumer must do.
func bareReceive(b *testing.B, repl *pgconn.PgConn, pos pglogrepl.LSN, want int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := 0
	for {
		msg, err := repl.ReceiveMessage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			b.Fatalf("unexpected %T", msg)
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				b.Fatal(err)
			}
			if ka.ReplyRequested {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos}); err != nil {
					b.Fatal(err)
				}
			}
		case pglogrepl.XLogDataByteID:
			// 1 + 24 bytes of header, then the pgoutput message.
			switch cd.Data[25] {
			case 'I':
				n++
			case 'C':
				if n >= want {
					return
				}
			}
		}
	}
}

// The Streaming rows' writers: writerConns connections upsert
// transactions of perTx rows, each into its own range of keysPerWriter
// keys, cycling through it.
const writerConns, perTx, keysPerWriter = 4, 100, 25_000

// maxBatches bounds the batch numbers a run may use; generously sized for
// any machine.
const maxBatches = 1 << 20

// writeLog records, per batch (one writer transaction), when the writer
// sent it and when its commit returned (unix ns; 0: not committed).
type writeLog struct {
	sent, committed []atomic.Int64
	batches         atomic.Int64 // batch numbers handed out, from 1
}

func newWriteLog() *writeLog {
	return &writeLog{sent: make([]atomic.Int64, maxBatches), committed: make([]atomic.Int64, maxBatches)}
}

// write runs the writers from start until deadline or until they have
// used lastBatch batch numbers, one transaction every every per writer
// (0: as fast as they can).
func (l *writeLog) write(b *testing.B, conns []*pgx.Conn, start, deadline time.Time, lastBatch int64, every time.Duration) {
	ctx := context.Background()
	var wg sync.WaitGroup
	var writeErr atomic.Value
	for w, conn := range conns {
		wg.Go(func() {
			lo := w * keysPerWriter
			next := start
			for off := 0; time.Now().Before(deadline); off = (off + perTx) % keysPerWriter {
				if every > 0 {
					next = next.Add(every)
					time.Sleep(time.Until(next))
				}
				batch := l.batches.Add(1)
				if batch > lastBatch || batch >= maxBatches {
					return
				}
				sql := "INSERT INTO stream_rows (id, batch, v) SELECT g, " + strconv.FormatInt(batch, 10) +
					", md5(random()::text) FROM generate_series(" + strconv.Itoa(lo+off) + ", " + strconv.Itoa(lo+off+perTx-1) +
					") g ON CONFLICT (id) DO UPDATE SET batch = EXCLUDED.batch, v = EXCLUDED.v"
				l.sent[batch].Store(time.Now().UnixNano())
				if _, err := conn.Exec(ctx, sql); err != nil {
					writeErr.Store(err)
					return
				}
				l.committed[batch].Store(time.Now().UnixNano())
			}
		})
	}
	wg.Wait()
	if err, _ := writeErr.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// rows is how many row changes the writers committed.
func (l *writeLog) rows() int64 {
	var total int64
	for i := int64(1); i <= l.batches.Load() && i < maxBatches; i++ {
		if l.committed[i].Load() != 0 {
			total += perTx
		}
	}
	return total
}

// openWriters opens the writers' connections.
func openWriters(b *testing.B, pg *harness.Postgres) []*pgx.Conn {
	conns := make([]*pgx.Conn, writerConns)
	for w := range conns {
		conns[w] = pg.Conn(b)
	}
	return conns
}

// awaitApplied waits until applied reaches want, failing the benchmark
// 5 minutes after since.
func awaitApplied(b *testing.B, applied *atomic.Int64, want int64, since time.Time) {
	for applied.Load() < want {
		if time.Since(since) > 5*time.Minute {
			b.Fatalf("applied %d of %d rows 5 minutes after the writers stopped", applied.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// pgStreaming runs the writers for d, at rate rows/s in all (0: as fast as
// they can), with an informer following, and reports rates and lags.
func pgStreaming(b *testing.B, pg *harness.Postgres, d time.Duration, rate int, bare bool) {
	log := newWriteLog()
	arrived := make([]atomic.Int64, maxBatches) // unix ns when the handler saw the batch's first row
	var applied atomic.Int64
	if bare {
		stop := pgBareFollow(b, pg, &applied)
		defer stop()
	} else {
		stop := pgInformerFollow(b, pg, func(r streamRow) {
			arrived[r.Batch].CompareAndSwap(0, time.Now().UnixNano())
			applied.Add(1)
		})
		defer stop()
	}

	conns := openWriters(b, pg)
	var every time.Duration // between one writer's transactions
	if rate > 0 {
		every = time.Duration(float64(time.Second) * perTx * writerConns / float64(rate))
	}
	b.StartTimer()
	start := time.Now()
	log.write(b, conns, start, start.Add(d), maxBatches, every)
	writeEnd := time.Now()
	total := log.rows()
	awaitApplied(b, &applied, total, writeEnd)
	applyEnd := time.Now()
	b.StopTimer()
	b.ReportMetric(float64(total)/writeEnd.Sub(start).Seconds(), "committed-rows/s")
	b.ReportMetric(float64(total)/applyEnd.Sub(start).Seconds(), "applied-rows/s")
	// How much of what the writers committed was applied, in the time it
	// took: applied over committed rows/s (#40 compares ours with the bare
	// loop's; each side's writers commit as fast as that side leaves them
	// the CPU).
	b.ReportMetric(writeEnd.Sub(start).Seconds()/applyEnd.Sub(start).Seconds(), "applied-share")
	if !bare { // the bare loop looks at one byte per message: it has no batch numbers
		// The commit happens between the writer sending the transaction and
		// hearing back: lag from the return is a lower bound (replication may
		// even beat the reply: no lag), lag from the send an upper bound.
		var lags, fromSend []float64
		for i := int64(1); i <= log.batches.Load() && i < maxBatches; i++ {
			c, a := log.committed[i].Load(), arrived[i].Load()
			if c == 0 {
				continue
			}
			lags = append(lags, max(0, float64(a-c))/1e6)
			fromSend = append(fromSend, float64(a-log.sent[i].Load())/1e6)
		}
		slices.Sort(lags)
		slices.Sort(fromSend)
		pct := func(p float64) float64 { return lags[min(len(lags)-1, int(p*float64(len(lags))))] }
		pctSend := func(p float64) float64 { return fromSend[min(len(fromSend)-1, int(p*float64(len(fromSend))))] }
		b.ReportMetric(pct(0.50), "lag-p50-ms")
		b.ReportMetric(pct(0.99), "lag-p99-ms")
		b.ReportMetric(pctSend(0.50), "lag-from-send-p50-ms")
		b.ReportMetric(pctSend(0.99), "lag-from-send-p99-ms")
	}
	b.ReportMetric(applyEnd.Sub(writeEnd).Seconds()*1000, "drain-ms")
}

// holdWalsender stops the walsender pid (SIGSTOP), so that changes pile
// up in the slot, and returns what lets it go on; resume is idempotent, so
// a caller can also defer it.
func holdWalsender(b *testing.B, pid int) (resume func()) {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		b.Fatalf("stopping the follower's walsender (pid %d): %v; this benchmark signals the server's processes, so it runs as root or as the server's OS user", pid, err)
	}
	stopped := true
	return func() {
		if stopped {
			stopped = false
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				b.Fatalf("resuming the follower's walsender (pid %d): %v", pid, err)
			}
		}
	}
}

// pgBacklog measures how fast a follower gets through WAL that is already
// written. It stops the follower's walsender (SIGSTOP: the server runs on
// this machine) while it waits for work, has the writers commit rows row
// changes unpaced, then lets the walsender go on (SIGCONT) and times the
// follower from there to the last row: the walsender decoding and the
// follower applying, each with a core, no writer competing for either.
func pgBacklog(b *testing.B, pg *harness.Postgres, rows int, bare bool) {
	var applied atomic.Int64
	if bare {
		stop := pgBareFollow(b, pg, &applied)
		defer stop()
	} else {
		stop := pgInformerFollow(b, pg, func(streamRow) { applied.Add(1) })
		defer stop()
	}
	pid := followerWalsender(b, pg)
	resume := holdWalsender(b, pid)
	defer resume()

	conns := openWriters(b, pg)
	log := newWriteLog()
	start := time.Now()
	log.write(b, conns, start, start.Add(10*time.Minute), int64(rows/perTx), 0)
	writeEnd := time.Now()
	total := log.rows()
	if total != int64(rows) {
		b.Fatalf("the writers committed %d rows, want %d", total, rows)
	}
	if n := applied.Load(); n != 0 {
		b.Fatalf("the follower applied %d rows while its walsender was stopped", n)
	}
	walCPU, ownCPU := procCPU([]int{pid}), selfCPU()
	b.StartTimer()
	resumed := time.Now()
	resume()
	awaitApplied(b, &applied, total, resumed)
	b.StopTimer()
	b.ReportMetric(procCPU([]int{pid})-walCPU, "walsender-cpu-ms")
	b.ReportMetric(selfCPU()-ownCPU, "process-cpu-ms")
	b.ReportMetric(float64(total)/writeEnd.Sub(start).Seconds(), "committed-rows/s")
	b.ReportMetric(float64(total)/time.Since(resumed).Seconds(), "drained-rows/s")
}

// followerWalsender is the pid of the one walsender streaming to a
// follower (the only active logical slot), once it streams.
func followerWalsender(b *testing.B, pg *harness.Postgres) int {
	conn := pg.Conn(b)
	defer conn.Close(context.Background())
	deadline := time.Now().Add(time.Minute)
	for {
		var pids []int32
		rows, err := conn.Query(context.Background(), "SELECT active_pid FROM pg_replication_slots WHERE active_pid IS NOT NULL AND slot_type = 'logical'")
		if err == nil {
			pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		}
		if err != nil {
			b.Fatal(err)
		}
		if len(pids) == 1 {
			return int(pids[0])
		}
		if time.Now().After(deadline) {
			b.Fatalf("want one active logical slot, the follower's; after a minute there are %d", len(pids))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pgInformerFollow runs an informer over stream_rows that calls note for
// every row the writers change, until the returned stop.
func pgInformerFollow(b *testing.B, pg *harness.Postgres, note func(streamRow)) (stop func()) {
	src, tbl := newPGTable[streamRow](b, pg, "stream_rows")
	inf := core.NewSharedIndexInformer[streamRow](tbl, core.InformerOptions[streamRow]{Name: "stream_rows"})
	if _, err := inf.AddEventHandler(core.ResourceEventHandlerFuncs[streamRow]{
		// Rows an earlier run left are listed first, carrying that run's
		// batch numbers: not part of this run.
		AddFunc: func(_ string, r streamRow, initial bool) {
			if !initial {
				note(r)
			}
		},
		UpdateFunc: func(_ string, _, r streamRow) { note(r) },
	}); err != nil {
		src.Close()
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { _ = inf.Run(ctx); close(runDone) }()
	stop = func() { cancel(); <-runDone; src.Close() }
	if err := inf.WaitForCacheSync(ctx); err != nil {
		stop()
		b.Fatal(err)
	}
	return stop
}

// pgBareFollow is the floor for a follower of stream_rows: a replication
// connection of its own (a temporary slot on the bench_stream
// publication) that counts the rows inserted or updated, looking at one
// byte per message, and answers keepalives. It runs until the returned
// stop.
func pgBareFollow(b *testing.B, pg *harness.Postgres, applied *atomic.Int64) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	repl, err := pgconn.Connect(ctx, pg.ReplicationConnString())
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, "bench_stream_bare", "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true})
	if err == nil {
		var pos pglogrepl.LSN
		if pos, err = pglogrepl.ParseLSN(res.ConsistentPoint); err == nil {
			err = pglogrepl.StartReplication(ctx, repl, "bench_stream_bare", pos, pglogrepl.StartReplicationOptions{
				PluginArgs: []string{"proto_version '1'", "publication_names 'bench_stream'"},
			})
		}
	}
	if err != nil {
		cancel()
		repl.Close(context.Background())
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		var pos pglogrepl.LSN
		for {
			msg, err := repl.ReceiveMessage(ctx)
			if err != nil {
				done <- err
				return
			}
			cd, ok := msg.(*pgproto3.CopyData)
			if !ok {
				done <- fmt.Errorf("unexpected %T on the replication connection", msg)
				return
			}
			switch cd.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
				if err != nil {
					done <- err
					return
				}
				if ka.ReplyRequested {
					if err := pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos}); err != nil {
						done <- err
						return
					}
				}
			case pglogrepl.XLogDataByteID:
				// 1 + 24 bytes of header (the message's start at 1..8), then the pgoutput message.
				pos = pglogrepl.LSN(binary.BigEndian.Uint64(cd.Data[1:9]))
				switch cd.Data[25] {
				case 'I', 'U':
					applied.Add(1)
				}
			}
		}
	}()
	return func() {
		cancel()
		if err := <-done; ctx.Err() == nil {
			b.Error(err)
		}
		repl.Close(context.Background())
	}
}
