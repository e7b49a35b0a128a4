package prommetrics

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay/relaytest"
)

// A running relay (a Postgres table into JetStream, elected through a
// Postgres advisory lock) reports, under its name, that it leads, its
// term, what it published and had stored, the stream's last sequence and
// version, the source's head and the lag.
func TestRelayMetrics(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	h := relaytest.New(t, pgtest.New(t, pg, pgtest.Options{}), nsrv.JetStream(t), relaytest.Options{
		NewElector: func(int) leader.Elector {
			el, err := leader.NewPostgres(pg.ConnString(), "prom-relay", leader.PostgresOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return el
		},
	})
	ctx := context.Background()
	rv, err := h.Put(ctx, "a", 1) // returns once the relay published it
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pm, err := New(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := h.Relay(0)
	pm.TrackRelay(r)
	l := map[string]string{"relay": r.Name()}
	informertest.Eventually(t, "dbinformer_relay_stored_resource_version reaches the write's version", func() bool {
		v, ok := sample(t, reg, "dbinformer_relay_stored_resource_version", l)
		return ok && v >= float64(rv)
	})
	want(t, reg, "dbinformer_relay_leading", l, 1)
	want(t, reg, "dbinformer_relay_terms_total", l, 1)
	want(t, reg, "dbinformer_relay_relists_total", l, 1)
	want(t, reg, "dbinformer_relay_repairs_total", l, 0)
	want(t, reg, "dbinformer_relay_term_restarts_total", l, 0)
	want(t, reg, "dbinformer_relay_stream_errors_total", l, 0)
	want(t, reg, "dbinformer_relay_head_errors_total", l, 0)
	st := r.RelayStatus(ctx)
	want(t, reg, "dbinformer_relay_epoch", l, float64(st.Epoch))
	if st.Epoch == 0 {
		t.Error("the leader's epoch is 0")
	}
	for _, name := range []string{"dbinformer_relay_stream_resource_version", "dbinformer_relay_head_resource_version"} {
		if v, ok := sample(t, reg, name, l); !ok || v < float64(rv) {
			t.Errorf("%s = %v (present %v), want at least %d", name, v, ok, rv)
		}
	}
	if v, ok := sample(t, reg, "dbinformer_relay_published_messages_total", l); !ok || v < 2 {
		t.Errorf("dbinformer_relay_published_messages_total = %v (present %v), want the term's first message and the write", v, ok)
	}
	if v, ok := sample(t, reg, "dbinformer_relay_stream_sequence", l); !ok || v < 2 {
		t.Errorf("dbinformer_relay_stream_sequence = %v (present %v), want at least 2", v, ok)
	}
	if _, ok := sample(t, reg, "dbinformer_relay_lag", l); !ok {
		t.Error("no dbinformer_relay_lag sample while the stream and the head can be read")
	}
	pm.UntrackRelay(r.Name())
	if _, ok := sample(t, reg, "dbinformer_relay_leading", l); ok {
		t.Error("an untracked relay still reports")
	}
}
