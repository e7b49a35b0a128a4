package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/examples/internal/exampletest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

var shareLine = regexp.MustCompile(`(?m)^(r\d): (\d+) shards \[[0-9 ]*\], (\d+) items cached$`)

func TestSharded(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	srv := harness.StartEtcd(t)
	cli := srv.Client(t)
	const items = 60
	p := exampletest.Start(t, func(ctx context.Context, out io.Writer) error {
		return run(ctx, []string{"-endpoints", strings.Join(srv.Endpoints(), ","), "-listen", "127.0.0.1:0",
			"-replicas", "3", "-shards", "16", "-lease", "2s", "-seed", strconv.Itoa(items)}, out)
	})
	base := p.BaseURL()

	// The overview: three replicas, every shard and every item once.
	deadline := time.Now().Add(exampletest.Deadline)
	for {
		_, body := exampletest.Get(t, base+"/")
		shards, cached, replicas := 0, 0, 0
		for _, m := range shareLine.FindAllStringSubmatch(body, -1) {
			s, _ := strconv.Atoi(m[2])
			c, _ := strconv.Atoi(m[3])
			shards, cached = shards+s, cached+c
			if s > 0 {
				replicas++
			}
		}
		if shards == 16 && cached == items && replicas == 3 {
			t.Logf("overview:\n%s", body)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the overview never showed 3 replicas sharing 16 shards and %d items:\n%s", items, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Each item's status was written, fenced, by one replica.
	ctx := context.Background()
	by := map[string]int{}
	for {
		resp, err := cli.Get(ctx, statusPrefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		clear(by)
		for _, kv := range resp.Kvs {
			var st Status
			if err := json.Unmarshal(kv.Value, &st); err != nil {
				t.Fatal(err)
			}
			by[st.Replica]++
		}
		if len(resp.Kvs) == items {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statuses written, want %d", len(resp.Kvs), items)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(by) < 2 {
		t.Errorf("statuses written by %v: the work was not split", by)
	}
	// Each replica's own pages: its shard status and its informer.
	for i := 1; i <= 3; i++ {
		exampletest.EventuallyGet(t, fmt.Sprintf("%s/r%d/debug/shards", base, i), `"replica": "r`+strconv.Itoa(i)+`"`)
		exampletest.EventuallyGet(t, fmt.Sprintf("%s/r%d/metrics", base, i), "dbinformer_shard_owned")
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("run returned %v after the stop", err)
	}
	t.Logf("statuses by replica: %v", by)
}
