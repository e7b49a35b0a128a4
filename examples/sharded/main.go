// Command sharded runs N replicas of one controller in one process over
// etcd; they split the keys under /sharded/items/ between them with
// package shard, each caching and reconciling only its share. See
// README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/shard"
)

// Item is what the controllers reconcile.
type Item struct {
	Spec int `json:"spec"`
}

// Status is what a reconcile writes: who handled the item, under which
// term of its shard.
type Status struct {
	Spec    int    `json:"spec"`
	Replica string `json:"replica"`
	Shard   int    `json:"shard"`
	Term    uint64 `json:"term"`
}

const itemsPrefix, statusPrefix, shardsPrefix = "/sharded/items/", "/sharded/status/", "/sharded/shards"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sharded:", err)
		os.Exit(1)
	}
}

// replica is one of the N replicas: in production, one process each.
type replica struct {
	id    string
	mgr   *controller.Manager
	items *core.SharedIndexInformer[Item]
	sh    *shard.Sharder
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sharded", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	listen := fs.String("listen", "127.0.0.1:8090", "HTTP address of the overview (/) and each replica's pages (/r1/debug/informers/, /r1/debug/shards, /r1/metrics)")
	n := fs.Int("replicas", 3, "replicas to run")
	shards := fs.Int("shards", 32, "virtual shards")
	lease := fs.Duration("lease", 3*time.Second, "membership lease: a stopped replica's shards move within it")
	seed := fs.Int("seed", 0, "write this many items at start")
	name := fs.String("name", "r", "replica IDs are this and a number; another process joining the same etcd needs another")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	for i := range *seed {
		if _, err := cli.Put(ctx, fmt.Sprintf("%sitem-%03d", itemsPrefix, i), `{"spec":1}`); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	backend, err := shard.NewEtcd(cli, shardsPrefix)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var rs []*replica
	mux := http.NewServeMux()
	for i := range *n {
		r, err := newReplica(ctx, cli, backend, fmt.Sprintf("%s%d", *name, i+1), *shards, *lease, log, out)
		if err != nil {
			return err
		}
		rs = append(rs, r)
		mux.Handle("/"+r.id+"/", http.StripPrefix("/"+r.id, r.mgr.Handler()))
		mux.Handle("/"+r.id+"/debug/shards", r.mgr.ShardStatus())
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, r := range rs {
			fmt.Fprintln(w, r.share())
		}
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	fmt.Fprintf(out, "serving http://%s (/ for each replica's share)\n", ln.Addr())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(rs))
	for i, r := range rs {
		wg.Go(func() {
			if err := r.mgr.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("replica %s: %w", r.id, err)
				cancel()
			}
		})
		wg.Go(func() { r.report(ctx, out) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func newReplica(ctx context.Context, cli *clientv3.Client, b shard.Backend, id string, shards int, lease time.Duration, log *slog.Logger, out io.Writer) (*replica, error) {
	sh, err := shard.New(b, shard.Options{ID: id, Shards: shards, Lease: lease, Logger: log})
	if err != nil {
		return nil, err
	}
	r := &replica{id: id, sh: sh, mgr: controller.NewManager(controller.ManagerOptions{Name: id, Sharder: sh, Logger: log})}
	lw, err := etcdinformer.NewPrefix(ctx, cli, itemsPrefix, etcdinformer.Options[Item]{})
	if err != nil {
		return nil, err
	}
	// The filter at decode: this replica's cache holds only its shards.
	src, err := shard.NewSource[Item](sh, lw)
	if err != nil {
		return nil, err
	}
	r.items = controller.Informer(r.mgr, "items", src, core.InformerOptions[Item]{Logger: log})
	src.Bind(r.items)
	_, err = controller.For(r.mgr, r.items, controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		it, ok := r.items.Lister().Get(key)
		if !ok {
			return controller.Result{}, nil
		}
		t, _ := controller.ShardTicketOf(ctx)
		st, _ := json.Marshal(Status{Spec: it.Spec, Replica: id, Shard: t.Shard, Term: t.Term})
		// Fenced: the write passes only while this replica still owns
		// the shard under this term.
		resp, err := cli.Txn(ctx).If(b.(*shard.Etcd).Fence(t.Shard, t.Term)).Then(clientv3.OpPut(statusPrefix+key, string(st))).Commit()
		if err != nil {
			return controller.Result{}, err
		}
		if !resp.Succeeded {
			fmt.Fprintf(out, "%s: write for %s refused: shard %d is no longer ours under term %d\n", id, key, t.Shard, t.Term)
			return controller.Result{}, nil
		}
		return controller.Result{}, nil
	}), controller.Options[string]{Workers: 2})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// share is one line about the replica's part.
func (r *replica) share() string {
	owned := r.sh.Owned()
	ids := make([]string, 0, len(owned))
	for _, s := range slices.Sorted(maps.Keys(owned)) {
		ids = append(ids, fmt.Sprint(s))
	}
	return fmt.Sprintf("%s: %d shards [%s], %d items cached", r.id, len(owned), strings.Join(ids, " "), r.items.Indexer().Len())
}

// report prints the replica's share each time it changes.
func (r *replica) report(ctx context.Context, out io.Writer) {
	changed := r.sh.Notify()
	last := ""
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
		if s := r.share(); s != last {
			fmt.Fprintln(out, s)
			last = s
		}
	}
}
