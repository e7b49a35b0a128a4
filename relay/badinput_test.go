package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
)

// A stream that is missing, or cannot hold a relay, is refused with the
// fix; so are missing options.
func TestBadInput(t *testing.T) {
	nsrv := harness.StartNATS(t)
	esrv := harness.StartEtcd(t)
	js := nsrv.JetStream(t)
	ctx := context.Background()
	src := etcdtest.New(t, esrv, etcdtest.Options{}).ListerWatcher()
	el, err := leader.NewEtcd(esrv.Client(t), "/bad/leader", leader.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}

	workq := relay.StreamConfig("WORKQ", "relay.workq")
	workq.Retention = jetstream.WorkQueuePolicy
	aged := relay.StreamConfig("AGED", "relay.aged")
	aged.MaxAge = time.Hour
	other := relay.StreamConfig("OTHER", "relay.other")
	other.Subjects = []string{"relay.other.>", "elsewhere.>"}
	for _, cfg := range []jetstream.StreamConfig{workq, aged, other} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateStream(ctx, relay.StreamConfig("GOOD", "relay.good")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, stream, prefix string
		el                   leader.Elector
		want                 []string
	}{
		{"missing", "NOPE", "relay.nope", el, []string{`relay stream "NOPE" does not exist`, `relay.StreamConfig("NOPE", "relay.nope")`}},
		{"work queue", "WORKQ", "relay.workq", el, []string{"retention is", "not limits", `fix: recreate or update it with relay.StreamConfig("WORKQ", "relay.workq")`}},
		{"max age", "AGED", "relay.aged", el, []string{"age or size limit", "MaxAge 1h0m0s"}},
		{"foreign subjects", "OTHER", "relay.other", el, []string{"not exactly", "nothing else may write to it"}},
		{"bad prefix", "GOOD", "relay.>", el, []string{`subject prefix "relay.>"`}},
		{"no elector", "GOOD", "relay.good", nil, []string{"Options.Elector is required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := relay.New(ctx, js, src, relay.Options[etcdtest.Item]{Stream: tc.stream, Prefix: tc.prefix, Elector: tc.el})
			if err == nil {
				t.Fatal("New accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %v\nwant it to say %q", err, w)
				}
			}
			if tc.el == nil {
				return
			}
			if _, err := relay.NewDownstream[etcdtest.Item](ctx, js, tc.stream, tc.prefix, relay.DownstreamOptions[etcdtest.Item]{}); err == nil || !strings.Contains(err.Error(), tc.want[0]) {
				t.Errorf("NewDownstream: %v, want it to say %q", err, tc.want[0])
			}
		})
	}
}
