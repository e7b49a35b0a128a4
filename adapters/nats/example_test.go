package natsinformer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
)

type User struct {
	Name string `json:"name"`
	Plan string `json:"plan"`
}

// An informer over a KV bucket: put a key, wait for the revision the put
// returned, read the cache.
func Example() {
	// A throwaway embedded server; in production, connect to yours with
	// the TLS and credential options it needs.
	dir, err := os.MkdirTemp("", "natsinformer-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		panic(err)
	}
	srv.Start()
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(30 * time.Second) {
		panic("nats-server not ready")
	}
	// ReconnectErrors lets the informer say why a reconnect fails
	// (connection refused, TLS) while it waits for the server.
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), natsinformer.ReconnectErrors())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "users"})
	if err != nil {
		panic(err)
	}
	kv.Put(ctx, "alice", []byte(`{"name":"Alice","plan":"free"}`))

	lw, err := natsinformer.NewKV(ctx, js, "users", natsinformer.KVOptions[User]{})
	if err != nil {
		panic(err) // e.g. the bucket does not exist
	}
	informer := core.NewSharedIndexInformer(lw, core.InformerOptions[User]{Name: "users"})
	added := make(chan string, 2)
	informer.AddEventHandler(core.ResourceEventHandlerFuncs[User]{
		AddFunc: func(key string, u User, initial bool) {
			added <- fmt.Sprint("added ", key, " ", u.Plan, " initial=", initial)
		},
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); informer.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if err := informer.WaitForCacheSync(ctx); err != nil {
		panic(err)
	}

	fmt.Println(<-added)
	rev, _ := kv.Put(ctx, "bob", []byte(`{"name":"Bob","plan":"pro"}`))
	if err := informer.WaitFor(ctx, core.ResourceVersion(rev)); err != nil {
		panic(err)
	}
	bob, _ := informer.Lister().Get("bob")
	fmt.Println(bob.Name, bob.Plan, "at revision", rev)
	fmt.Println(<-added)
	// Output:
	// added alice free initial=true
	// Bob pro at revision 2
	// added bob pro initial=false
}

// An event stream whose every message is its entity's whole state (one
// message kept per subject) needs no fold: Stateless keeps no copy beside
// the informer's cache, and the reducer only decodes.
func ExampleNewEventStream_stateless() {
	dir, err := os.MkdirTemp("", "natsinformer-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		panic(err)
	}
	srv.Start()
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(30 * time.Second) {
		panic("nats-server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PROFILES", Subjects: []string{"profiles.*"}, MaxMsgsPerSubject: 1}); err != nil {
		panic(err)
	}
	js.Publish(ctx, "profiles.alice", []byte(`{"name":"Alice","plan":"free"}`))

	lw, err := natsinformer.NewEventStream(ctx, js, "PROFILES", natsinformer.EventStreamOptions[User]{
		Stateless: true,
		Reduce: func(_ User, _ bool, m natsinformer.Message) (User, bool, error) {
			var u User
			err := json.Unmarshal(m.Data, &u)
			return u, err == nil, err
		},
	})
	if err != nil {
		panic(err)
	}
	informer := core.NewSharedIndexInformer(lw, core.InformerOptions[User]{Name: "profiles"})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); informer.Run(runCtx) }()
	defer func() { stop(); <-done }()

	ack, _ := js.Publish(ctx, "profiles.alice", []byte(`{"name":"Alice","plan":"pro"}`))
	if err := informer.WaitFor(ctx, core.ResourceVersion(ack.Sequence)); err != nil {
		panic(err)
	}
	alice, _ := informer.Lister().Get("alice")
	fmt.Println(alice.Name, alice.Plan, "at sequence", ack.Sequence)
	// Output:
	// Alice pro at sequence 2
}
