package pginformer_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
)

// TestHalfOpenStream: a replication connection that goes silent without
// closing (the proxy holds every byte both ways, as a frozen server or a
// network dropping packets would) is ended by the stream once it heard
// nothing for its silence limit, though it asked for a keepalive, with an
// error that says so; once the path is back the informer converges, with
// a temporary slot by relisting, with a permanent one by resuming.
func TestHalfOpenStream(t *testing.T) {
	for _, permanent := range []bool{false, true} {
		t.Run(fmt.Sprintf("permanent=%t", permanent), func(t *testing.T) {
			pg := harness.StartPostgres(t)
			// The server ends a walsender it has not heard from for 8s; the
			// stream's limit is 3 status intervals, and at least half of
			// that plus two intervals (5s here): the client side notices
			// first, as it must when the server's FIN would be lost too.
			pg.Exec(t, "ALTER SYSTEM SET wal_sender_timeout = '8s'")
			pg.Exec(t, "SELECT pg_reload_conf()")
			pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL)`)
			px, err := proxy.New(fmt.Sprintf("127.0.0.1:%d", pg.Port))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			viaProxy := strings.Replace(pg.ConnString(), fmt.Sprintf("port=%d ", pg.Port), fmt.Sprintf("port=%d ", px.Port()), 1)
			if viaProxy == pg.ConnString() {
				t.Fatalf("connection string %q does not name port %d", pg.ConnString(), pg.Port)
			}
			opts := pginformer.Options{StatusInterval: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
			if permanent {
				opts.PermanentSlot, opts.Slot = true, "halfopen"
			}
			src, err := pginformer.NewSource(ctxFor(t), viaProxy, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { src.Close() })
			tbl := newTable[kv](t, src, "kv")
			if got := tbl.ProgressInterval(); got != 5*time.Second/driver.StuckIntervals {
				t.Errorf("ProgressInterval() = %v, want the 5s silence limit / %d", got, driver.StuckIntervals)
			}
			lw := &countingLW[kv]{ListerWatcher: tbl}
			oc := &orderChecker{t: t, last: map[string]int{}}
			inf, errs := informertest.Run[kv](t, lw, core.InformerOptions[kv]{
				Backoff: core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
				// The stream's own detection is what this test is about.
				ProgressInterval: -1,
			}, oc.handler())
			informertest.WaitFor(t, inf, writeRound(t, pg, 1))

			px.Freeze()
			writeRound(t, pg, 2) // held: the walsender's bytes wait in the proxy
			err = errs.Wait(t, "the stream ending as half-open", func(err error) bool {
				return strings.Contains(err.Error(), "half-open")
			})
			for _, want := range []string{"nothing received from the server", "keepalive was requested", src.SlotName()} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the half-open error does not say %q: %v", want, err)
				}
			}
			if strings.Contains(err.Error(), pg.Password) {
				t.Errorf("the error shows the password: %v", err)
			}
			px.Thaw()

			informertest.WaitFor(t, inf, writeRound(t, pg, 3))
			if err := cacheMatches(t, pg.Conn(t), "kv", inf); err != nil {
				t.Error(err)
			}
			lists := lw.lists.Load()
			switch {
			case permanent && lists != 1:
				t.Errorf("%d Lists: a permanent slot resumes without a relist", lists)
			case !permanent && lists < 2:
				t.Errorf("%d Lists: a temporary slot's stream that ended must relist", lists)
			}
		})
	}
}
