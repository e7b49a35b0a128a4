package etcdinformer_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
)

// User is stored as JSON under /example/users/<id>.
type User struct {
	Name  string `json:"name"`
	Admin bool   `json:"admin"`
}

// An informer over an etcd prefix, and read-your-writes: the revision of a
// Put, passed to WaitFor, guarantees the cache has it.
func Example() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   exampleEndpoints(),
		DialTimeout: 5 * time.Second,
		// Keepalives let the client notice a member that stopped
		// answering; see the package doc.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer cli.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix, err := etcdinformer.NewPrefix(ctx, cli, "/example/users", etcdinformer.Options[User]{})
	if err != nil {
		panic(err)
	}
	users := core.NewSharedIndexInformer[User](prefix, core.InformerOptions[User]{Name: "users"})
	added := make(chan string, 1)
	_, _ = users.AddEventHandler(core.ResourceEventHandlerFuncs[User]{
		AddFunc: func(key string, u User, _ bool) { added <- key + " " + u.Name },
	})

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = users.Run(runCtx); close(done) }()
	if err := users.WaitForCacheSync(ctx); err != nil {
		panic(err)
	}

	put, err := cli.Put(ctx, "/example/users/ada", `{"name":"Ada Lovelace","admin":true}`)
	if err != nil {
		panic(err)
	}
	if err := users.WaitFor(ctx, core.ResourceVersion(put.Header.Revision)); err != nil {
		panic(err)
	}
	u, ok := users.Lister().Get("ada")
	fmt.Println("cached:", ok, u.Name, u.Admin)
	// Handlers run on their own goroutine, after the cache is updated.
	fmt.Println("handler:", <-added)

	stop()
	<-done
	// Output:
	// cached: true Ada Lovelace true
	// handler: ada Ada Lovelace
}

// A Prefix of raw bytes, and what a directory prefix and a literal prefix
// cover. List is what an informer calls first; a program rarely calls it.
func ExampleNewPrefix() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: exampleEndpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, k := range []string{"/example/raw/a", "/example/raw/b/c", "/example/rawer/d"} {
		if _, err := cli.Put(ctx, k, "value of "+k); err != nil {
			panic(err)
		}
	}

	show := func(prefix string, opts etcdinformer.Options[[]byte]) {
		p, err := etcdinformer.NewPrefix(ctx, cli, prefix, opts)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%q covers:", p.Prefix())
		if _, err := p.List(ctx, driver.ListSink[[]byte]{Emit: func(ev driver.Event[[]byte]) error {
			fmt.Printf(" %q", ev.Key)
			return nil
		}}); err != nil {
			panic(err)
		}
		fmt.Println()
	}
	show("/example/raw", etcdinformer.Options[[]byte]{Codec: codec.Raw{}})
	show("/example/raw", etcdinformer.Options[[]byte]{Codec: codec.Raw{}, LiteralPrefix: true})
	// Output:
	// "/example/raw/" covers: "a" "b/c"
	// "/example/raw" covers: "/a" "/b/c" "er/d"
}
