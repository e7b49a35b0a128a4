package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/shard"
)

// Every replica computes the same assignment from the same members; a
// member that joins takes only the shards it wins.
func ExampleAssign() {
	three := []shard.Member{{ID: "r1"}, {ID: "r2"}, {ID: "r3"}}
	before, _ := shard.Assign(8, three)
	after, _ := shard.Assign(8, append(three, shard.Member{ID: "r4"}))
	for s := range before {
		if before[s] != after[s] {
			fmt.Printf("shard %d: %s -> %s\n", s, before[s], after[s])
		}
	}
	fmt.Println("key user/42 is in shard", shard.Of("user/42", 8))
	// Output:
	// shard 0: r3 -> r4
	// key user/42 is in shard 1
}

// Two replicas split 16 shards over etcd; work on a key runs under a
// ticket whose term fences what it writes.
func ExampleSharder() {
	dir, err := os.MkdirTemp("", "shard-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := harness.StartEtcdMain(dir)
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	backend, err := shard.NewEtcd(cli, "/example/shards")
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var replicas []*shard.Sharder
	done := make(chan struct{})
	for _, id := range []string{"r1", "r2"} {
		s, err := shard.New(backend, shard.Options{ID: id, Shards: 16, Lease: 3 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			panic(err)
		}
		replicas = append(replicas, s)
		go func() { _ = s.Run(ctx); done <- struct{}{} }()
	}
	for len(replicas[0].Owned())+len(replicas[1].Owned()) != 16 {
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range replicas {
		if t, ok := s.Begin("user/42"); ok {
			// Write under t.Term, fenced: the write fails once the shard
			// moved, whatever this replica still believes.
			resp, err := cli.Txn(ctx).If(backend.Fence(t.Shard, t.Term)).Then(clientv3.OpPut("/example/users/42", s.ID())).Commit()
			t.Done()
			if err != nil {
				panic(err)
			}
			fmt.Println("user/42 handled by its shard's owner; fenced write passed:", resp.Succeeded)
		}
	}
	cancel()
	<-done
	<-done
	// Output:
	// user/42 handled by its shard's owner; fenced write passed: true
}
