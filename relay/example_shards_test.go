package relay_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
	"github.com/dbinformer/dbinformer/shard"
)

// A relay with per-shard subjects (Options.Shards) and two downstreams
// that own half of the shards each: each consumes only its shards'
// subjects and caches only their keys, and WaitFor after a write means
// the same in both. (With package shard, a shard.Source over a Downstream
// hands it the shards its replica owns, and moves them at handoffs.)
func ExampleDownstream_shards() {
	dir, err := os.MkdirTemp("", "relay-shards-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	etcdSrv, err := harness.StartEtcdMain(dir + "/etcd")
	if err != nil {
		panic(err)
	}
	defer etcdSrv.Close()
	natsSrv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir + "/nats", NoSigs: true, NoLog: true})
	if err != nil {
		panic(err)
	}
	natsSrv.Start()
	defer natsSrv.WaitForShutdown()
	defer natsSrv.Shutdown()
	if !natsSrv.ReadyForConnections(30 * time.Second) {
		panic("nats-server not ready")
	}
	nc, err := nats.Connect(natsSrv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdSrv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, relay.StreamConfig("ITEMS", "relay.items")); err != nil {
		panic(err)
	}

	// The relay: the same shard count as the sharders'.
	const shards = 4
	src, err := etcdinformer.NewPrefix(ctx, cli, "/items/", etcdinformer.Options[Config]{})
	if err != nil {
		panic(err)
	}
	el, err := leader.NewEtcd(cli, "/relay/items/leader", leader.EtcdOptions{TTL: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	r, err := relay.New(ctx, js, src, relay.Options[Config]{Stream: "ITEMS", Prefix: "relay.items", Elector: el, Shards: shards})
	if err != nil {
		panic(err)
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(relayCtx) }()

	// Two replicas, each with an informer over its shards.
	owned := [][]int{{0, 1}, {2, 3}}
	var infs []*core.SharedIndexInformer[Config]
	infCtx, stopInfs := context.WithCancel(ctx)
	infDone := make(chan struct{}, len(owned))
	for i, set := range owned {
		down, err := relay.NewDownstream(ctx, js, "ITEMS", "relay.items", relay.DownstreamOptions[Config]{Shards: shards, Owned: set})
		if err != nil {
			panic(err)
		}
		inf := core.NewSharedIndexInformer[Config](down, core.InformerOptions[Config]{Name: fmt.Sprintf("replica%d", i)})
		go func() { _ = inf.Run(infCtx); infDone <- struct{}{} }()
		infs = append(infs, inf)
	}

	var rev int64
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		put, err := cli.Put(ctx, "/items/"+name, `{"value":"`+name+`"}`)
		if err != nil {
			panic(err)
		}
		rev = put.Header.Revision
	}
	for i, inf := range infs {
		if err := inf.WaitFor(ctx, core.ResourceVersion(rev)); err != nil {
			panic(err)
		}
		keys := inf.Indexer().ListKeys()
		slices.Sort(keys)
		for _, k := range keys {
			if !slices.Contains(owned[i], shard.Of(k, shards)) {
				panic("a key of another shard")
			}
		}
		fmt.Println("replica", i, "shards", owned[i], "caches", keys)
	}

	stopInfs()
	for range owned {
		<-infDone
	}
	stopRelay()
	fmt.Println("relay stopped:", <-relayDone)
	// Output:
	// replica 0 shards [0 1] caches [a b d f]
	// replica 1 shards [2 3] caches [c e]
	// relay stopped: <nil>
}
