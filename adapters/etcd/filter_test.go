package etcdinformer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// keyModel follows one key through its writes as a filtered informer's
// handler must see it: enter as an add, change as an update, leave (or be
// deleted while in) as a delete carrying the last matching version.
type keyModel struct {
	held bool
	v    int
	log  []string
}

func (m *keyModel) put(key string, v int, in bool) {
	switch {
	case in && m.held:
		m.log = append(m.log, fmt.Sprintf("update %s %d->%d", key, m.v, v))
	case in:
		m.log = append(m.log, fmt.Sprintf("add %s v=%d", key, v))
	case m.held:
		m.log = append(m.log, fmt.Sprintf("delete %s v=%d", key, m.v))
	}
	if in {
		m.v = v
	}
	m.held = in
}

func (m *keyModel) del(key string) {
	if m.held {
		m.log = append(m.log, fmt.Sprintf("delete %s v=%d", key, m.v))
	}
	m.held = false
}

// filteredTruth reads prefix at rev and keeps what f matches.
func filteredTruth(t *testing.T, c *clientv3.Client, prefix string, rev core.ResourceVersion, f *filter.Filter[item]) map[string]item {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithRev(int64(rev)))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]item{}
	for _, kv := range resp.Kvs {
		var it item
		if err := json.Unmarshal(kv.Value, &it); err != nil {
			t.Fatal(err)
		}
		k := strings.TrimPrefix(string(kv.Key), prefix)
		if f.Match(k, it) {
			m[k] = it
		}
	}
	return m
}

// TestFilterEnterLeave: keys move into and out of a filter (a key range
// pushed down to etcd, a value field evaluated in the adapter) under
// concurrent writers. Each key's handler log is exactly its enter/leave
// history, the cache equals the filtered range read at the same revision,
// and across a relist a key that left meanwhile is a finalStateUnknown
// delete carrying its last matching state.
func TestFilterEnterLeave(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("filter")
	ctx, cancel := context.WithTimeout(context.Background(), 5*converge)
	defer cancel()
	f := filter.MustNew[item](filter.And(filter.Prefix(filter.Key, "in/"), filter.Eq("note", "yes")))
	lw, err := etcdinformer.NewPrefix(ctx, c, prefix, etcdinformer.Options[item]{Where: f, PageSize: 3})
	if err != nil {
		t.Fatal(err)
	}

	var version atomic.Int64
	const writers, keysPerWriter, ops = 4, 4, 60
	models := map[string]*keyModel{}
	var keys []string
	for w := range writers {
		for k := range keysPerWriter {
			for _, dir := range []string{"in", "out"} {
				key := fmt.Sprintf("%s/w%d-k%d", dir, w, k)
				keys = append(keys, key)
				models[key] = &keyModel{}
			}
		}
	}
	// Seed: half the keys match at first.
	for i, key := range keys {
		v := int(version.Add(1))
		note := map[bool]string{true: "yes", false: "no"}[i%4 < 2]
		if _, err := putItem(ctx, c, prefix+key, item{Version: v, Note: note}); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(key, "in/") {
			models[key].put(key, v, note == "yes")
			for j, l := range models[key].log {
				models[key].log[j] = l + " initial"
			}
		}
	}

	spy := informertest.Wrap[item](lw)
	rec := informertest.NewRecorder(t, itemVersion)
	inf, errs := informertest.Run[item](t, spy, core.InformerOptions[item]{Backoff: fastBackoff}, rec)

	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range ops {
				key := fmt.Sprintf("%s/w%d-k%d", []string{"in", "out"}[r.IntN(2)], w, r.IntN(keysPerWriter))
				m := models[key]
				in := strings.HasPrefix(key, "in/")
				if r.IntN(6) == 0 {
					if _, err := c.Delete(ctx, prefix+key); err != nil {
						t.Error(err)
						return
					}
					if in {
						mu.Lock()
						m.del(key)
						mu.Unlock()
					}
					continue
				}
				v := int(version.Add(1))
				note := []string{"yes", "no"}[r.IntN(2)]
				if _, err := putItem(ctx, c, prefix+key, item{Version: v, Note: note}); err != nil {
					t.Error(err)
					return
				}
				if in {
					mu.Lock()
					m.put(key, v, note == "yes")
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, key := range keys {
		want := models[key].log
		if !strings.HasPrefix(key, "in/") {
			want = nil
		}
		expectKey(t, rec, key, want...)
	}
	head, err := lw.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, head)
	truth := filteredTruth(t, c, prefix, head, f)
	if got := cacheState(inf); !maps.Equal(got, truth) {
		t.Fatalf("cache at revision %d differs from the filtered range:\n cache %v\n etcd  %v", head, got, truth)
	}
	if len(truth) == 0 {
		t.Fatal("the filter matched nothing at the end: the test proves little")
	}

	// A write only to keys outside the filter still advances WaitFor.
	rv, err := putItem(ctx, c, prefix+"out/extra", item{Version: int(version.Add(1)), Note: "yes"})
	if err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, rv)

	// Across a relist: one held key leaves the filter while the watch is
	// down, one key enters.
	held := slices.Sorted(maps.Keys(truth))[0]
	var entering string
	for _, key := range keys {
		if _, ok := truth[key]; !ok && strings.HasPrefix(key, "in/") {
			entering = key
			break
		}
	}
	gate := spy.HoldLists()
	spy.Break(fmt.Errorf("test: %w", core.ErrExpired))
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	lastV := truth[held].Version
	if _, err := putItem(ctx, c, prefix+held, item{Version: int(version.Add(1)), Note: "no"}); err != nil {
		t.Fatal(err)
	}
	ev := int(version.Add(1))
	if _, err := putItem(ctx, c, prefix+entering, item{Version: ev, Note: "yes"}); err != nil {
		t.Fatal(err)
	}
	gate.Release()
	expectKey(t, rec, held, append(slices.Clone(models[held].log), fmt.Sprintf("delete %s v=%d unknown", held, lastV))...)
	expectKey(t, rec, entering, append(slices.Clone(models[entering].log), fmt.Sprintf("add %s v=%d", entering, ev))...)
	if err := errs.Find(func(err error) bool { return !strings.Contains(err.Error(), "test: ") }); err != nil {
		t.Errorf("unexpected error reported: %v", err)
	}
}

func TestFilterRefused(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	ctx := context.Background()
	f := filter.MustNew[item](filter.Server(filter.Eq("note", "yes")))
	_, err := etcdinformer.NewPrefix(ctx, c, "/x", etcdinformer.Options[item]{Where: f})
	if err == nil || !strings.Contains(err.Error(), `etcd prefix "/x/" cannot evaluate note = "yes"`) {
		t.Errorf("a Server condition on a value field: %v", err)
	}
	f = filter.MustNew[item](filter.And(filter.Ge(filter.Key, "b"), filter.Lt(filter.Key, "a")))
	_, err = etcdinformer.NewPrefix(ctx, c, "/x", etcdinformer.Options[item]{Where: f})
	if err == nil || !strings.Contains(err.Error(), "select no key") {
		t.Errorf("an empty key range: %v", err)
	}
}
