package servers

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestEtcdSmoke(t *testing.T) {
	e := StartEtcd(t)
	c := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	put, err := c.Put(ctx, "/smoke/a", "1")
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	rev := put.Header.Revision
	if _, err := c.Put(ctx, "/smoke/a", "2"); err != nil {
		t.Fatalf("second put: %v", err)
	}
	wch := c.Watch(clientv3.WithRequireLeader(ctx), "/smoke/", clientv3.WithPrefix(), clientv3.WithRev(rev))
	var got []string
	for len(got) < 2 {
		resp, ok := <-wch
		if !ok {
			t.Fatalf("watch channel closed after %v", got)
		}
		if err := resp.Err(); err != nil {
			t.Fatalf("watch: %v", err)
		}
		for _, ev := range resp.Events {
			got = append(got, string(ev.Kv.Value))
		}
	}
	if got[0] != "1" || got[1] != "2" {
		t.Fatalf("watch from revision %d delivered %v, want [1 2]", rev, got)
	}
	if h := e.Head(t); h != rev+1 {
		t.Fatalf("Head = %d, want %d", h, rev+1)
	}
}

// TestEtcdTwiceRestartCompact starts a second server in the same process
// (etcd registers process-global metrics, which must not get in the way),
// restarts it on the same data dir and ports, and compacts it.
func TestEtcdTwiceRestartCompact(t *testing.T) {
	a := StartEtcd(t)
	b := StartEtcd(t)
	if a.Endpoints()[0] == b.Endpoints()[0] {
		t.Fatalf("two servers share endpoint %s", a.Endpoints()[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cb := b.Client(t)
	put, err := cb.Put(ctx, "k", "before")
	if err != nil {
		t.Fatalf("put: %v", err)
	}

	b.Stop()
	b.Restart(t)
	resp, err := cb.Get(ctx, "k")
	if err != nil {
		t.Fatalf("get after restart (the client must reconnect): %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before" || resp.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("after restart got %v, want k=before at revision %d", resp.Kvs, put.Header.Revision)
	}

	put2, err := cb.Put(ctx, "k", "after")
	if err != nil {
		t.Fatalf("put after restart: %v", err)
	}
	b.Compact(t, put2.Header.Revision)
	_, err = cb.Get(ctx, "k", clientv3.WithRev(put.Header.Revision))
	if !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("read below the compaction: err = %v, want ErrCompacted", err)
	}

	// The first server is unaffected.
	if _, err := a.Client(t).Put(ctx, "k", "a"); err != nil {
		t.Fatalf("put to first server: %v", err)
	}
}

// TestEtcdParallel starts servers concurrently, as tests of several
// packages (or t.Parallel tests of one) do in one process.
func TestEtcdParallel(t *testing.T) {
	for i := 0; i < 3; i++ {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			e := StartEtcd(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c := e.Client(t)
			if _, err := c.Put(ctx, "k", fmt.Sprint(i)); err != nil {
				t.Fatalf("put: %v", err)
			}
			resp, err := c.Get(ctx, "k")
			if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != fmt.Sprint(i) {
				t.Fatalf("get: %v %v", resp, err)
			}
		})
	}
}
