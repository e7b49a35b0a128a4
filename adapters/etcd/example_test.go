package etcd_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
)

// User is stored as JSON under /example/users/<id>.
type User struct {
	Name  string `json:"name"`
	Admin bool   `json:"admin"`
}

// An informer over an etcd prefix, and read-your-writes: the revision of a
// Put, passed to WaitFor, guarantees the cache has it.
func Example() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: exampleEndpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()

	lw, err := etcdinformer.New(etcdinformer.Config[User]{Client: cli, Prefix: "/example/users"})
	if err != nil {
		panic(err)
	}
	users := core.NewSharedIndexInformer[User](lw, core.InformerOptions[User]{Name: "users"})
	added := make(chan string, 1)
	_, _ = users.AddEventHandler(core.ResourceEventHandlerFuncs[User]{
		AddFunc: func(key string, u User, _ bool) { added <- key + " " + u.Name },
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
