package etcdinformer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// The benchmarks compare the adapter with the raw client doing the same
// reads and decoding the same JSON, alternating the two in every iteration
// and reporting adapter/raw as "ratio": on a shared, noisy machine only a
// ratio measured in one run means something.

const benchKeys = 5000

// benchSetup fills a prefix with benchKeys JSON values, written in
// transactions of 100, and returns the revision before the first write.
func benchSetup(b *testing.B) (*clientv3.Client, string, int64) {
	srv := harness.StartEtcd(b)
	c := srv.Client(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*converge)
	defer cancel()
	prefix := "/bench/"
	first, err := c.Get(ctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < benchKeys; i += 100 {
		ops := make([]clientv3.Op, 0, 100)
		for j := i; j < i+100; j++ {
			v, _ := json.Marshal(item{Version: j, Note: "some payload to decode, as a real value would have"})
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%skey-%06d", prefix, j), string(v)))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	return c, prefix, first.Header.Revision
}

func BenchmarkList(b *testing.B) {
	c, prefix, _ := benchSetup(b)
	lw := newLW(b, c, prefix, 500)
	ctx := context.Background()
	var raw, adapter time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		n := 0
		var rev int64
		key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
		for {
			ops := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(500)}
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
				break
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
		t1 := time.Now()
		m := 0
		if _, err := lw.List(ctx, driver.ListSink[item]{Emit: func(ev driver.Event[item]) error {
			if ev.Err != nil {
				return ev.Err
			}
			m++
			return nil
		}}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if n != benchKeys || m != benchKeys {
			b.Fatalf("raw read %d, adapter %d, want %d", n, m, benchKeys)
		}
		raw += t1.Sub(t0)
		adapter += t2.Sub(t1)
	}
	b.ReportMetric(float64(adapter)/float64(raw), "ratio")
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
}

// BenchmarkWatchReplay watches the writes of the setup from their first
// revision: etcd replays history, the client decodes every event.
func BenchmarkWatchReplay(b *testing.B) {
	c, prefix, before := benchSetup(b)
	lw := newLW(b, c, prefix, 0)
	var raw, adapter time.Duration
	b.ResetTimer()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		t0 := time.Now()
		n := 0
		wch := c.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(before+1), clientv3.WithPrevKV())
		for n < benchKeys {
			resp := <-wch
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
		t1 := time.Now()
		m := 0
		errDone := errors.New("all changes seen")
		err := lw.Watch(ctx, core.ResourceVersion(before), driver.WatchOptions[item]{Emit: func(batch []driver.Event[item]) error {
			for _, ev := range batch {
				if ev.Type != driver.Bookmark {
					m++
				}
			}
			if m >= benchKeys {
				return errDone
			}
			return nil
		}})
		t2 := time.Now()
		if !errors.Is(err, errDone) {
			b.Fatal(err)
		}
		cancel()
		raw += t1.Sub(t0)
		adapter += t2.Sub(t1)
	}
	b.ReportMetric(float64(adapter)/float64(raw), "ratio")
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
}
