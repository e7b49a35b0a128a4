package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/adapters/nats/natstest"
	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// versions is the handler that watches for a key's version going
// backwards.
type versions[T any] struct {
	version func(T) int64
	mu      sync.Mutex
	top     map[string]int64
}

func (v *versions[T]) see(what, key string, obj T) {
	n := v.version(obj)
	v.mu.Lock()
	defer v.mu.Unlock()
	if prev, ok := v.top[key]; ok && n < prev {
		fmt.Fprintf(os.Stderr, "BACKWARDS %s %s: version %d after %d\n", what, key, n, prev)
	}
	v.top[key] = max(v.top[key], n)
}

func (v *versions[T]) OnAdd(key string, obj T, _ bool)    { v.see("add", key, obj) }
func (v *versions[T]) OnUpdate(key string, _, obj T)      { v.see("update", key, obj) }
func (v *versions[T]) OnDelete(key string, obj T, _ bool) { v.see("delete", key, obj) }

// target is one adapter's ListerWatcher and what the child needs of it.
type target[T any] struct {
	lw      driver.ListerWatcher[T]
	head    func(context.Context) (core.ResourceVersion, error)
	version func(T) int64
	codec   codec.Codec[T] // nil: the ListerWatcher's own
}

type flags struct {
	adapter, dir   string
	table, slot    string // postgres
	prefix         string // etcd
	bucket         string // nats-kv
	stream, filter string // nats-stream
	namespace      string // kube
	final          bool
	lateHandler    bool
}

func main() {
	var f flags
	flag.StringVar(&f.adapter, "adapter", "postgres", "postgres, etcd, nats-kv, nats-stream or kube")
	flag.StringVar(&f.dir, "dir", "", "checkpoint directory")
	flag.StringVar(&f.table, "table", "", "postgres: table")
	flag.StringVar(&f.slot, "slot", "", "postgres: permanent slot")
	flag.StringVar(&f.prefix, "prefix", "", "etcd: watched prefix")
	flag.StringVar(&f.bucket, "bucket", "", "nats-kv: bucket (keys below \"w.\")")
	flag.StringVar(&f.stream, "stream", "", "nats-stream: stream")
	flag.StringVar(&f.filter, "filter", "", "nats-stream: subject filter")
	flag.StringVar(&f.namespace, "namespace", "", "kube: namespace of the ConfigMaps")
	flag.BoolVar(&f.final, "final", false, "sync, print the cache and exit")
	flag.BoolVar(&f.lateHandler, "late-handler", false, "add the handler once synced (a warm start with no handler decodes the checkpoint's objects when first read)")
	flag.Parse()
	if err := start(f); err != nil {
		fmt.Fprintln(os.Stderr, "killchild:", err)
		os.Exit(1)
	}
}

func start(f flags) error {
	ctx := context.Background()
	conn := os.Getenv("KILLCHILD_CONN")
	switch f.adapter {
	case "postgres":
		src, err := pginformer.NewSource(ctx, conn, pginformer.Options{PermanentSlot: true, Slot: f.slot, StatusInterval: 200 * time.Millisecond})
		if err != nil {
			return err
		}
		defer src.Close()
		tbl, err := pginformer.NewTable[pgtest.Row](ctx, src, f.table, pginformer.TableOptions[pgtest.Row]{})
		if err != nil {
			return err
		}
		return run(target[pgtest.Row]{lw: tbl, head: tbl.Head, version: func(r pgtest.Row) int64 { return r.V }}, f)
	case "etcd":
		client, err := clientv3.New(clientv3.Config{Endpoints: []string{conn}, DialTimeout: 10 * time.Second})
		if err != nil {
			return err
		}
		defer client.Close()
		p, err := etcdinformer.NewPrefix(ctx, client, f.prefix, etcdinformer.Options[etcdtest.Item]{})
		if err != nil {
			return err
		}
		return run(target[etcdtest.Item]{lw: p, head: p.Head, version: func(it etcdtest.Item) int64 { return it.Version }, codec: codec.JSON[etcdtest.Item]{}}, f)
	case "nats-kv", "nats-stream":
		nc, err := nats.Connect(conn, nats.Name("killchild"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		version := func(o natstest.Obj) int64 { return o.V }
		if f.adapter == "nats-kv" {
			kv, err := natsinformer.NewKV(ctx, js, f.bucket, natsinformer.KVOptions[natstest.Obj]{Prefix: "w."})
			if err != nil {
				return err
			}
			return run(target[natstest.Obj]{lw: kv, head: kv.Head, version: version, codec: codec.JSON[natstest.Obj]{}}, f)
		}
		es, err := natsinformer.NewEventStream(ctx, js, f.stream, natsinformer.EventStreamOptions[natstest.Obj]{Filter: f.filter, Reduce: natstest.Reduce})
		if err != nil {
			return err
		}
		return run(target[natstest.Obj]{lw: es, head: es.Head, version: version, codec: codec.JSON[natstest.Obj]{}}, f)
	case "kube":
		cfg, err := clientcmd.BuildConfigFromFlags("", conn)
		if err != nil {
			return fmt.Errorf("kubeconfig: %w", err) // names the file, never its token
		}
		cfg.QPS, cfg.Burst = 1000, 2000
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		res, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps(f.namespace), kubeinformer.Options{Namespace: f.namespace})
		if err != nil {
			return err
		}
		version := func(cm *corev1.ConfigMap) int64 {
			n, err := strconv.ParseInt(cm.Data[kubetest.VersionKey], 10, 64)
			if err != nil {
				fmt.Fprintf(os.Stderr, "ConfigMap %s/%s has no version: %v\n", cm.Namespace, cm.Name, err)
				return -1
			}
			return n
		}
		return run(target[*corev1.ConfigMap]{lw: res, head: res.Head, version: version, codec: codec.JSON[*corev1.ConfigMap]{}}, f)
	}
	return fmt.Errorf("unknown -adapter %q", f.adapter)
}

func run[T any](tg target[T], f flags) error {
	ctx := context.Background()
	store, err := checkpoint.NewDirStore(f.dir)
	if err != nil {
		return err
	}
	// The informer finds the source's capabilities (the stuck-watch
	// interval among them) through the Spy's Unwrap.
	spy := informertest.Wrap[T](tg.lw)
	inf := core.NewSharedIndexInformer[T](spy, core.InformerOptions[T]{
		Name:         "killchild",
		Backoff:      core.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond},
		ErrorHandler: func(err error) { fmt.Fprintln(os.Stderr, "informer:", err) },
		// Often, so that kills land during writes of checkpoints too.
		Checkpoint: &core.CheckpointOptions[T]{Store: store, Codec: tg.codec, Interval: 20 * time.Millisecond},
	})
	handler := &versions[T]{version: tg.version, top: map[string]int64{}}
	if !f.lateHandler {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(rctx) }()
	defer func() { cancel(); <-done }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		return err
	}
	if f.lateHandler {
		// It gets the cache as initial adds, decoding what was loaded.
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	if v := inf.SyncStatus().Checkpoint; v > 0 {
		fmt.Printf("loaded %d\n", v)
	}
	fmt.Printf("lists %d\n", spy.Lists())
	fmt.Println("synced")
	if !f.final {
		select {} // until killed
	}
	head, err := tg.head(ctx)
	if err != nil {
		return err
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := inf.WaitFor(wctx, head); err != nil {
		return err
	}
	fmt.Printf("lists %d\n", spy.Lists())
	state := map[string]int64{}
	inf.Indexer().Range(func(k string, obj T) bool { state[k] = tg.version(obj); return true })
	b, err := json.Marshal(state)
	if err != nil {
		return err
	}
	fmt.Printf("state %s\n", b)
	return nil
}
