package leader_test

import (
	"context"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
)

// Run a function only while leader of an etcd election. The lead context
// ends when the leadership is lost; Term.Epoch fences what a deposed
// leader might still write.
func Example() {
	dir, err := os.MkdirTemp("", "leader-example-")
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

	el, err := leader.NewEtcd(cli, "/example/leader", leader.EtcdOptions{Identity: "worker-1", TTL: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = el.Run(ctx, func(ctx context.Context, t leader.Term) error {
		fmt.Printf("%s leads (epoch > 0: %v)\n", t.Identity, t.Epoch > 0)
		return nil // done: resign so that another candidate takes over
	})
	fmt.Println("run returned:", err)
	// Output:
	// worker-1 leads (epoch > 0: true)
	// run returned: <nil>
}
