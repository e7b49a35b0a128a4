package relay_test

import (
	"context"
	"fmt"
	"os"
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
)

type Config struct {
	Value string `json:"value"`
}

// A relay reads an etcd prefix (leader elected in the same etcd) and
// re-serves it over JetStream; an informer on the stream waits for the
// revision an etcd Put returned, as it would next to etcd, and audits its
// cache against the stream (every 10 minutes; AuditNow runs one at once).
func Example() {
	dir, err := os.MkdirTemp("", "relay-example-")
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

	// The stream, once.
	if _, err := js.CreateStream(ctx, relay.StreamConfig("CONFIG", "relay.config")); err != nil {
		panic(err)
	}

	// The relay process: the source, an election, the relay.
	src, err := etcdinformer.NewPrefix(ctx, cli, "/config/", etcdinformer.Options[Config]{})
	if err != nil {
		panic(err)
	}
	el, err := leader.NewEtcd(cli, "/relay/config/leader", leader.EtcdOptions{TTL: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	r, err := relay.New(ctx, js, src, relay.Options[Config]{Stream: "CONFIG", Prefix: "relay.config", Elector: el})
	if err != nil {
		panic(err)
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(relayCtx) }()

	// A downstream process: an informer over the stream.
	down, err := relay.NewDownstream(ctx, js, "CONFIG", "relay.config", relay.DownstreamOptions[Config]{})
	if err != nil {
		panic(err)
	}
	inf := core.NewSharedIndexInformer[Config](down, core.InformerOptions[Config]{Name: "config", Audit: &core.AuditOptions[Config]{}})
	infCtx, stopInf := context.WithCancel(ctx)
	infDone := make(chan error, 1)
	go func() { infDone <- inf.Run(infCtx) }()

	// Write to etcd; the revision is the consistency token.
	put, err := cli.Put(ctx, "/config/color", `{"value":"blue"}`)
	if err != nil {
		panic(err)
	}
	if err := inf.WaitFor(ctx, core.ResourceVersion(put.Header.Revision)); err != nil {
		panic(err)
	}
	c, ok := inf.Indexer().Get("color")
	fmt.Println(ok, c.Value)
	fmt.Println("audit:", inf.AuditNow(ctx).Outcome)

	stopInf()
	<-infDone
	stopRelay()
	fmt.Println("relay stopped:", <-relayDone)
	// Output:
	// true blue
	// audit: equal
	// relay stopped: <nil>
}
