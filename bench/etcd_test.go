package bench_test

import (
	"context"
	"encoding/json"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
)

const etcdPrefix = "/bench/"

// etcdFill puts keys JSON items under etcdPrefix (the initial state) and
// then updates every key once (the changes), in transactions of 100, and
// returns the revision between the two.
func etcdFill(b *testing.B, c *clientv3.Client, keys int) (mid int64) {
	ctx := context.Background()
	write := func(version int) int64 {
		var rev int64
		for i := 0; i < keys; i += 100 {
			ops := make([]clientv3.Op, 0, 100)
			for j := i; j < min(i+100, keys); j++ {
				k, o := newItem(j)
				o.N = version
				v, _ := json.Marshal(o)
				ops = append(ops, clientv3.OpPut(etcdPrefix+k, string(v)))
			}
			resp, err := c.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				b.Fatal(err)
			}
			rev = resp.Header.Revision
		}
		return rev
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
			var it item
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
			var it item
			if err := json.Unmarshal(ev.Kv.Value, &it); err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
}

func oursEtcdList(b *testing.B, lw *etcdinformer.ListerWatcher[item]) int {
	n := 0
	if _, err := lw.List(context.Background(), core.ListOptions[item]{Emit: func(ev core.Event[item]) error {
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

func oursEtcdWatch(b *testing.B, lw *etcdinformer.ListerWatcher[item], mid int64, want int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := lw.Watch(ctx, core.ResourceVersion(mid))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	for n := 0; n < want; {
		batch, err := w.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range batch {
			if ev.Err != nil {
				b.Fatal(ev.Err)
			}
			if ev.Type != core.Bookmark {
				n++
			}
		}
	}
}

// BenchmarkEtcd: 100,000 keys listed (List) and 100,000 changes (one
// update per key) replayed by a watch from the revision before them
// (Watch), through our ListerWatcher and through the raw clientv3 doing the
// same reads and decoding the same JSON. The sides alternate, after one
// untimed run each so that neither pays for a cold server.
func BenchmarkEtcd(b *testing.B) {
	keys := size(100_000, 2_000)
	rounds := size(3, 1)
	srv := harness.StartEtcd(b)
	c := srv.Client(b)
	mid := etcdFill(b, c, keys)
	lw, err := etcdinformer.New(etcdinformer.Config[item]{Client: c, Prefix: etcdPrefix})
	if err != nil {
		b.Fatal(err)
	}
	defer lw.Close()
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
		alternate(b, rounds, side{name: "ours", n: keys, unit: "key", run: oursList}, side{name: "raw", n: keys, unit: "key", run: rawList})
	})
	b.Run("Watch", func(b *testing.B) {
		oursWatch()
		rawWatch()
		alternate(b, rounds, side{name: "ours", n: keys, unit: "change", run: oursWatch}, side{name: "raw", n: keys, unit: "change", run: rawWatch})
	})
}
