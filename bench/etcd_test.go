package bench_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

const etcdPrefix = "/bench/"

// etcdFill puts keys items under etcdPrefix through the harness (the
// initial state) and then updates every key once (the changes), in
// transactions of 100, and returns the revision between the two.
func etcdFill(b *testing.B, h *etcdtest.Harness, keys int) (mid int64) {
	ctx := context.Background()
	write := func(version int64) int64 {
		var rev core.ResourceVersion
		batch := make([]string, 0, 100)
		for i := 0; i < keys; i += 100 {
			batch = batch[:0]
			for j := i; j < min(i+100, keys); j++ {
				k, _ := newItem(j)
				batch = append(batch, k)
			}
			var err error
			if rev, err = h.PutAll(ctx, batch, version); err != nil {
				b.Fatal(err)
			}
		}
		return int64(rev)
	}
	mid = write(1)
	write(2)
	return mid
}

// rawEtcdList is what a user of the raw client writes: pages of 500 pinned
// at the first page's revision, each value decoded.
func rawEtcdList(b *testing.B, c *clientv3.Client) int {
	ctx := context.Background()
	n := 0
	var rev int64
	key, end := etcdPrefix, clientv3.GetPrefixRangeEnd(etcdPrefix)
	for {
		ops := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(etcdinformer.DefaultPageSize)}
		if rev != 0 {
			ops = append(ops, clientv3.WithRev(rev))
		}
		resp, err := c.Get(ctx, key, ops...)
		if err != nil {
			b.Fatal(err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			var it etcdtest.Item
			if err := json.Unmarshal(kv.Value, &it); err != nil {
				b.Fatal(err)
			}
			n++
		}
		if !resp.More {
			return n
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// rawEtcdWatch replays the changes after mid with the raw watch (the
// options the adapter uses), decoding each value.
func rawEtcdWatch(b *testing.B, c *clientv3.Client, mid int64, want int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := c.Watch(clientv3.WithRequireLeader(ctx), etcdPrefix, clientv3.WithPrefix(), clientv3.WithRev(mid+1), clientv3.WithPrevKV())
	for n := 0; n < want; {
		resp, ok := <-wch
		if !ok {
			b.Fatal("watch closed")
		}
		if err := resp.Err(); err != nil {
			b.Fatal(err)
		}
		for _, ev := range resp.Events {
			var it etcdtest.Item
			if err := json.Unmarshal(ev.Kv.Value, &it); err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
}

func oursEtcdList(b *testing.B, lw driver.ListerWatcher[etcdtest.Item]) int {
	n := 0
	if _, err := lw.List(context.Background(), driver.ListSink[etcdtest.Item]{Emit: func(ev driver.Event[etcdtest.Item]) error {
		if ev.Err != nil {
			return ev.Err
		}
		n++
		return nil
	}}); err != nil {
		b.Fatal(err)
	}
	return n
}

var errSeenAll = errors.New("every change seen")

func oursEtcdWatch(b *testing.B, lw driver.ListerWatcher[etcdtest.Item], mid int64, want int) {
	n := 0
	err := lw.Watch(context.Background(), core.ResourceVersion(mid), driver.WatchOptions[etcdtest.Item]{Emit: func(batch []driver.Event[etcdtest.Item]) error {
		for _, ev := range batch {
			if ev.Err != nil {
				return ev.Err
			}
			if ev.Type != driver.Bookmark {
				n++
			}
		}
		if n >= want {
			return errSeenAll
		}
		return nil
	}})
	if !errors.Is(err, errSeenAll) {
		b.Fatal(err)
	}
}

// BenchmarkEtcd: 100,000 keys listed (List) and 100,000 changes (one
// update per key) replayed by a watch from the revision before them
// (Watch), through our Prefix and through the raw clientv3 doing the same
// reads and decoding the same JSON. The sides alternate, after one untimed
// run each so that neither pays for a cold server, five rounds each: under
// load the wall time of one run varies by half of itself, the same side
// against itself included, and the median of five moves less than that of
// three.
func BenchmarkEtcd(b *testing.B) {
	keys := size(100_000, 2_000)
	rounds := size(5, 1)
	srv := harness.StartEtcd(b)
	h := etcdtest.New(b, srv, etcdtest.Options{Prefix: etcdPrefix, Payload: "org-00 team-000"})
	c := h.Client()
	mid := etcdFill(b, h, keys)
	lw := h.ListerWatcher()
	check := func(n int) {
		if n != keys {
			b.Fatalf("listed %d keys, want %d", n, keys)
		}
	}
	oursList := func() { check(oursEtcdList(b, lw)) }
	rawList := func() { check(rawEtcdList(b, c)) }
	oursWatch := func() { oursEtcdWatch(b, lw, mid, keys) }
	rawWatch := func() { rawEtcdWatch(b, c, mid, keys) }
	b.Run("List", func(b *testing.B) {
		oursList()
		rawList()
		cpu := cpuSides{}
		alternate(b, rounds, side{name: "ours", n: keys, unit: "key", run: cpu.wrap(b, "ours", oursList)}, side{name: "raw", n: keys, unit: "key", run: cpu.wrap(b, "raw", rawList)})
		cpu.report(b)
	})
	b.Run("Watch", func(b *testing.B) {
		oursWatch()
		rawWatch()
		cpu := cpuSides{}
		alternate(b, rounds, side{name: "ours", n: keys, unit: "change", run: cpu.wrap(b, "ours", oursWatch)}, side{name: "raw", n: keys, unit: "change", run: cpu.wrap(b, "raw", rawWatch)})
		cpu.report(b)
	})
}
