package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/relay"
)

// Two failures in a row: a leader dies half-way through publishing a
// group, the next term closes it with an abort message and dies before
// its relist, and a third term takes over. Downstreams dropped the
// aborted group's changes; the messages stay in the stream, so a key whose
// message there already equals the source (an update) or whose message
// there is a delete the source agrees with must still be republished, or
// a watching downstream keeps the key's state from before the group.
//
// The two dead terms' messages are written as the relay writes them
// (the wire format of doc.go), so the interleaving is exact.
func TestAbortedGroupRepublishedAfterTwoFailures(t *testing.T) {
	// The stream ends in the abort message.
	t.Run("abort at the tail", func(t *testing.T) { abortedTwice(t, false) })
	// The second term's relist was cut short too: the stream ends inside
	// it, and the first group's keys it had not republished yet are still
	// the aborted group's messages.
	t.Run("abort then a partial relist", func(t *testing.T) { abortedTwice(t, true) })
}

func abortedTwice(t *testing.T, partialRelist bool) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	h := pgtest.New(t, pg, pgtest.Options{})
	ctx := context.Background()
	js := nsrv.JetStream(t)
	stream, err := js.CreateStream(ctx, relay.StreamConfig("A", "a"))
	if err != nil {
		t.Fatal(err)
	}
	down, err := relay.NewDownstream[pgtest.Row](ctx, js, "A", "a", relay.DownstreamOptions[pgtest.Row]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run(t, down, core.InformerOptions[pgtest.Row]{Name: "down"}, informertest.NewRecorder(t, h.Version))
	run := func(epoch uint64) func() {
		r, err := relay.New(ctx, js, h.ListerWatcher(), relay.Options[pgtest.Row]{Stream: "A", Prefix: "a", Elector: fixedElector{epoch}, ProgressInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		return sync.OnceFunc(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}

	// Term 1 relays a, b, c and d, which every downstream applies.
	stop1 := run(1)
	rv, err := h.PutAll(ctx, []string{"a", "b", "c", "d"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, rv)
	stop1()

	// One transaction: a and b updated, c deleted. Term 1 dies after
	// publishing a's and c's messages of its group of three.
	err = pgx.BeginFunc(ctx, pg.Conn(t), func(tx pgx.Tx) error {
		table := pgx.Identifier{h.TableName()}.Sanitize()
		if _, err := tx.Exec(ctx, "UPDATE "+table+" SET v = 2 WHERE k IN ('a', 'b')"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE k = 'c'")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var lsn pglogrepl.LSN
	if err := pg.Conn(t).QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	v := uint64(lsn)
	prev := lastChangeIn(t, stream, "a")
	publish := func(m *nats.Msg) {
		t.Helper()
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	key := func(v uint64, k, op string, index, count int, epoch uint64, data string, flags ...string) *nats.Msg {
		m := nats.NewMsg(relay.KeySubject("a", k))
		meta := []string{strconv.FormatUint(v, 10), strconv.FormatUint(prev, 10), strconv.FormatUint(epoch, 10), op, strconv.Itoa(index), strconv.Itoa(count)}
		m.Header.Set("Dbi", strings.Join(append(meta, flags...), " "))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%d-%d-%s-%d", v, index, k, epoch))
		m.Data = []byte(data)
		return m
	}
	publish(key(v, "a", "put", 0, 3, 1, `{"K":"a","V":2}`))
	publish(key(v, "c", "del", 1, 3, 1, ""))
	// Term 2 closes the group and dies before its relist is stored whole
	// (or before it starts).
	abort := nats.NewMsg("a.abort." + strconv.FormatUint(v, 10))
	abort.Header.Set("Dbi", fmt.Sprintf("%d %d 2", v, prev))
	publish(abort)
	if partialRelist {
		// Its relist group, at a later version (the forced keys a and c,
		// and b changed): only a's message is stored.
		publish(key(v+1, "a", "put", 0, 3, 2, `{"K":"a","V":2}`, "relist"))
	}

	// Term 3. A marker write after it starts: once the downstream has it,
	// it has everything before.
	stop3 := run(3)
	defer stop3()
	rv, err = h.Put(ctx, "marker", 1)
	if err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, rv)
	truth, err := h.Truth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, row := range inf.Indexer().List() {
		got[row.K] = row.V
	}
	for _, d := range informertest.Diff("the downstream cache", got, truth) {
		t.Error(d)
	}
}

// lastChangeIn returns the version of the last complete group of changes
// in the stream (what the relay writes as prev): the last message's
// version if it ends a group, else its prev field.
func lastChangeIn(t *testing.T, st jetstream.Stream, prefix string) uint64 {
	t.Helper()
	m, err := st.GetLastMsgForSubject(context.Background(), prefix+".>")
	if err != nil {
		t.Fatal(err)
	}
	// Dbi: <version> <prev> <epoch>[ <op> <index> <count>[ flags]]
	f := strings.Fields(m.Header.Get("Dbi"))
	if len(f) < 3 {
		t.Fatalf("the stream's last message (%s) has no relay header: %v", m.Subject, m.Header)
	}
	n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
	if len(f) >= 6 && n(4)+1 == n(5) {
		return n(0)
	}
	return n(1)
}
