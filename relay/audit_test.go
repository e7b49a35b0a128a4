package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
	"github.com/dbinformer/dbinformer/relay/relaytest"
)

// The audit of a downstream informer over a relayed Postgres table: the
// stream as it is in production (one message per key, so busy keys make
// the watch catch up and deliver changes ahead of their version) is what
// the cache is compared with. Clean: equal; lies of an informertest.Lossy
// between the Downstream and the informer: found and healed; writers on
// a few busy keys during every audit: equal.
func TestPostgresAudit(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	conformance.RunAudit(t, caps, func(t *testing.T) conformance.Harness[pgtest.Row] {
		return relaytest.New(t, pgtest.New(t, pg, pgtest.Options{}), nsrv.JetStream(t), relaytest.Options{
			NewElector: func(int) leader.Elector {
				el, err := leader.NewPostgres(pg.ConnString(), "relay-audit", leader.PostgresOptions{Check: 2e8})
				if err != nil {
					t.Fatal(err)
				}
				return el
			},
		})
	})
}

// The same over an etcd prefix.
func TestEtcdAudit(t *testing.T) {
	nsrv := harness.StartNATS(t)
	esrv := harness.StartEtcd(t)
	client := esrv.Client(t)
	conformance.RunAudit(t, caps, func(t *testing.T) conformance.Harness[etcdtest.Item] {
		return relaytest.New(t, etcdtest.New(t, esrv, etcdtest.Options{}), nsrv.JetStream(t), relaytest.Options{
			NewElector: func(int) leader.Elector {
				el, err := leader.NewEtcd(client, fmt.Sprintf("/relay-audit/%s", t.Name()), leader.EtcdOptions{TTL: 2e9})
				if err != nil {
					t.Fatal(err)
				}
				return el
			},
		})
	})
}

// An audit while the downstream's watch catches up over busy keys: the
// catch-up delivers keys' changes at a version before their own, so the
// cache holds states newer than its version. The audit must neither
// report those keys nor heal them back to the stream's state at its
// version (that would lose the newer change for good): equal, nothing
// healed, and the cache equal to the source after it.
func TestAuditDuringCatchUp(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	src := pgtest.New(t, pg, pgtest.Options{})
	ctx := context.Background()
	js := nsrv.JetStream(t)
	if _, err := js.CreateStream(ctx, relay.StreamConfig("A", "a")); err != nil {
		t.Fatal(err)
	}
	el, err := leader.NewPostgres(pg.ConnString(), "audit-catchup", leader.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(ctx, js, src.ListerWatcher(), relay.Options[pgtest.Row]{Stream: "A", Prefix: "a", Elector: el})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()

	caught := &flagHandler{want: "caught up over superseded messages"}
	down, err := relay.NewDownstream[pgtest.Row](ctx, nsrv.JetStream(t), "A", "a", relay.DownstreamOptions[pgtest.Row]{Logger: slog.New(caught)})
	if err != nil {
		t.Fatal(err)
	}
	g := &auditedDown{heldDown: heldDown{Downstream: down}}
	inf, _ := informertest.Run(t, g, core.InformerOptions[pgtest.Row]{Name: "held", Audit: &core.AuditOptions[pgtest.Row]{Period: time.Hour, Pace: -1}})
	must := func(rv core.ResourceVersion, err error) core.ResourceVersion {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return rv
	}
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	informertest.WaitFor(t, inf, must(src.PutAll(ctx, keys, 0)))

	// Hold the watch while the keys are rewritten (see
	// TestCatchUpInsteadOfRelist), audit while a writer goes on rewriting
	// them, and let the watch go once the audit has read the stream's
	// keys: it catches up, slowed down, under writes that do not pause,
	// delivering changes read past the audit's version at versions before
	// it, while the audit reads and then waits for it.
	release := make(chan struct{})
	g.hold.Store(&release)
	for n := range 40 {
		must(src.PutAll(ctx, keys, int64(n+1)))
	}
	must(src.Delete(ctx, "k3"))
	read := make(chan struct{})
	g.onRows(len(keys), func() { close(read) })
	stop := make(chan struct{})
	var last core.ResourceVersion
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := int64(100); ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			rv, err := src.PutAll(ctx, keys[n%5*10:n%5*10+10], n)
			if err != nil {
				t.Error(err)
				return
			}
			last = rv
		}
	})
	result := make(chan core.AuditResult, 1)
	go func() { result <- inf.AuditNow(ctx) }()
	<-read
	g.slow.Store(true)
	g.hold.Store(nil)
	close(release)
	res := <-result
	close(stop)
	wg.Wait()
	g.slow.Store(false)
	if res.Outcome != core.AuditEqual || res.Healed != 0 {
		t.Errorf("audit while the watch caught up: %v, want equal with nothing healed", res)
	}
	t.Logf("audit while the watch caught up: %v", res)
	informertest.WaitFor(t, inf, last)
	truth, err := src.Truth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, row := range inf.Indexer().List() {
		got[row.K] = row.V
	}
	if !maps.Equal(got, truth) {
		t.Errorf("after the audit the cache holds %v, the source %v", got, truth)
	}
	if !caught.seen.Load() {
		t.Error("the downstream never caught up over superseded messages: the test did not make its watch miss any")
	}
	if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual {
		t.Errorf("audit after the catch-up: %v, want equal", r)
	}
}

// auditedDown is a heldDown whose audits call a function once they have
// read n rows.
type auditedDown struct {
	heldDown
	mu   sync.Mutex
	n    int
	once func()
}

func (d *auditedDown) onRows(n int, f func()) {
	d.mu.Lock()
	d.n, d.once = n, f
	d.mu.Unlock()
}

func (d *auditedDown) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[pgtest.Row]) (core.ResourceVersion, error) {
	emit := sink.Emit
	rows := 0
	sink.Emit = func(ev driver.Event[pgtest.Row]) error {
		rows++
		d.mu.Lock()
		if f := d.once; f != nil && rows >= d.n {
			d.once = nil
			f()
		}
		d.mu.Unlock()
		return emit(ev)
	}
	return d.Downstream.AuditList(ctx, atLeast, sink)
}
