package statuspage_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// sources are the two sources of the browser test: two key-value buckets
// of an embedded NATS server (integration/harness).
type sources struct {
	users, orders driver.ListerWatcher[user]
	kind          string // the kind the page names them by
	buckets       map[driver.ListerWatcher[user]]jetstream.KeyValue
}

func (s *sources) putUser(t *testing.T, key string, u user)  { s.put(t, s.users, key, u) }
func (s *sources) putOrder(t *testing.T, key string, u user) { s.put(t, s.orders, key, u) }

func (s *sources) put(t *testing.T, lw driver.ListerWatcher[user], key string, u user) {
	t.Helper()
	b, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.buckets[lw].Put(context.Background(), key, b); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func newSources(t *testing.T) *sources {
	t.Helper()
	ctx := context.Background()
	js := harness.StartNATS(t).JetStream(t)
	s := &sources{kind: "natsinformer.KV", buckets: map[driver.ListerWatcher[user]]jetstream.KeyValue{}}
	for _, b := range []struct {
		name string
		lw   *driver.ListerWatcher[user]
	}{{"users", &s.users}, {"orders", &s.orders}} {
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b.name})
		if err != nil {
			t.Fatalf("create bucket %s: %v", b.name, err)
		}
		lw, err := natsinformer.NewKV[user](ctx, js, b.name, natsinformer.KVOptions[user]{})
		if err != nil {
			t.Fatal(err)
		}
		*b.lw = lw
		s.buckets[lw] = kv
	}
	return s
}
