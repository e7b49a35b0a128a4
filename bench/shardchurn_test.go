package bench_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
	"github.com/dbinformer/dbinformer/shard"
)

// BenchmarkShardChurn (#41): sharded replicas, each a process of its own
// (this test binary re-executed: runShardMember), split the keys of a
// source between them (1,000 keys; 200 under -short; 32 shards, a 3 s
// lease) while eight writers put 1,000 changes a second in all (200 under
// -short; offered-writes/s says what the source took), for two sources,
// each with its membership in the same system:
//   - etcd: the keys of a prefix, membership and ownership in etcd
//     (shard.NewEtcd); each handler copies its change to /out/<key> in a
//     transaction fenced on the shard's term (shard.Etcd.Fence) and
//     reports only the calls whose write the fence let through;
//   - relay: a Postgres table read by one relay into a stream on a
//     nats-server, each replica's Downstream wrapped in shard.NewSource
//     (one slot, one reader, N partial caches), membership and ownership
//     in Postgres (shard.NewPostgres); each handler upserts its change
//     into a table in a transaction fenced on the shard's term
//     (shard.Postgres.Fence), ordered by a sequence read after the fence;
//   - relay-subjects: the same with the relay publishing per-shard
//     subjects (relay.Options.Shards), each Downstream consuming only its
//     shards' (JetStream filters instead of the decoder);
//   - kube: the ConfigMaps of a namespace of a real kube-apiserver,
//     membership in its Leases (shard.NewKube); the Kubernetes API has no
//     fence, so every handler call counts.
//
// Each replica caches only its shards (shard.NewSource, filtering at
// decode) and its handler (shard.Handler) reports every call: key,
// replica, term, start, end and the value handled. The membership moves
// 4 → 6 (two join) → 3 (three leave, SIGTERM: graceful), then a member is
// killed (SIGKILL), one joins, and one is frozen (SIGSTOP; SIGCONT once
// its shards moved, when it finds its lease lost and joins again); each
// change waits until the shards settled as Assign gives them, then a few
// seconds of writes.
//
// Reported: for each change, the handoff time's p99 over the shards it
// moved (the change → the new owner has loaded the shard, s; targets
// ≤ 2 s graceful, ≤ lease + 2 s after the kill and the freeze); overlaps
// (0): on etcd and through the relay, a write of one replica committed
// after another's under a later term (the fence's order); on kube, calls on one
// key by two replicas at overlapping times; wall-overlaps, calls that
// overlap in wall time on etcd (a replica frozen between its write's
// commit and its reply shows one; counted, not a fault); lost, the
// keys whose last value no handler was handed last, or that are not
// cached by exactly one replica equal to the source (0); shared-keys, the
// keys handled by several replicas in turn (the churn moved work: more
// than 0).
func BenchmarkShardChurn(b *testing.B) {
	b.Run("etcd", func(b *testing.B) {
		e := harness.StartEtcd(b)
		for range b.N {
			runShardChurn(b, &etcdChurn{e: e, client: e.Client(b)})
		}
	})
	b.Run("relay", func(b *testing.B) {
		pg := harness.StartPostgres(b)
		nsrv := harness.StartNATS(b)
		for range b.N {
			runShardChurn(b, &relayChurn{pg: pg, nsrv: nsrv})
		}
	})
	b.Run("relay-subjects", func(b *testing.B) {
		pg := harness.StartPostgres(b)
		nsrv := harness.StartNATS(b)
		for range b.N {
			runShardChurn(b, &relayChurn{pg: pg, nsrv: nsrv, shards: churnShards})
		}
	})
	b.Run("kube", func(b *testing.B) {
		k := harness.StartKube(b)
		for range b.N {
			runShardChurn(b, &kubeChurn{k: k, cs: k.Client(b)})
		}
	})
}

// churnSource is the source the members shard: its keys (key i, as the
// informer names it), writes, and its state.
type churnSource interface {
	// setup makes the source's n keys, valued 0, and returns the spec
	// every member shares.
	setup(b *testing.B, n int) shardMemberSpec
	put(ctx context.Context, i int, v int64) error
	truth(b *testing.B) map[string]int64
}

var shardChurnSeq atomic.Int64

type etcdChurn struct {
	e      *harness.Etcd
	client *clientv3.Client
	prefix string
}

func (c *etcdChurn) setup(b *testing.B, n int) shardMemberSpec {
	c.prefix = fmt.Sprintf("/churn%d", shardChurnSeq.Add(1))
	for i := range n {
		if err := c.put(context.Background(), i, 0); err != nil {
			b.Fatal(err)
		}
	}
	return shardMemberSpec{Kind: "etcd", Conn: strings.Join(c.e.Endpoints(), ","), Prefix: c.prefix}
}

func (c *etcdChurn) put(ctx context.Context, i int, v int64) error {
	_, err := c.client.Put(ctx, fmt.Sprintf("%s/data/k%04d", c.prefix, i), fmt.Sprintf(`{"v":%d}`, v))
	return err
}

func (c *etcdChurn) truth(b *testing.B) map[string]int64 {
	resp, err := c.client.Get(context.Background(), c.prefix+"/data/", clientv3.WithPrefix())
	if err != nil {
		b.Fatal(err)
	}
	want := map[string]int64{}
	for _, kv := range resp.Kvs {
		var v shardValue
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			b.Fatal(err)
		}
		want[strings.TrimPrefix(string(kv.Key), c.prefix+"/data/")] = v.V
	}
	return want
}

type kubeChurn struct {
	k  *harness.Kube
	cs kubernetes.Interface
	ns string
}

func (c *kubeChurn) setup(b *testing.B, n int) shardMemberSpec {
	ctx := context.Background()
	c.ns = fmt.Sprintf("churn-%d", shardChurnSeq.Add(1))
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("k%04d", i)}, Data: map[string]string{"v": "0"}}
				if _, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return shardMemberSpec{Kind: "kube", Conn: c.k.Kubeconfig(), Prefix: c.ns}
}

func (c *kubeChurn) put(ctx context.Context, i int, v int64) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("k%04d", i)}, Data: map[string]string{"v": strconv.FormatInt(v, 10)}}
	_, err := c.cs.CoreV1().ConfigMaps(c.ns).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

func (c *kubeChurn) truth(b *testing.B) map[string]int64 {
	list, err := c.cs.CoreV1().ConfigMaps(c.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	want := map[string]int64{}
	for i := range list.Items {
		want[c.ns+"/"+list.Items[i].Name] = configMapValue(&list.Items[i])
	}
	return want
}

// shardMemberEnv holds, in a re-executed test binary, the shard member to
// run (a JSON shardMemberSpec); see TestMain.
const shardMemberEnv = "DBINFORMER_SHARD_MEMBER"

type shardMemberSpec struct {
	// Kind is "etcd" (the keys of Prefix/data, membership under
	// Prefix/shards, Conn: the endpoints), "kube" (the ConfigMaps of
	// namespace Prefix, membership in its Leases, Conn: a kubeconfig) or
	// "relay" (a Postgres table through the relay stream Stream, subjects
	// Prefix, on the nats-server NATS; membership in Postgres tables named
	// Prefix, Conn: the database).
	Kind, ID, Conn, Prefix string
	NATS, Stream           string
	RelayShards            int // the relay's Options.Shards (0: one subject per key)
	Shards                 int
	Lease                  time.Duration
}

// runShardMember is a shard member's process. It reports on stdout, a
// line each: "owned <shard:term,...>" when its loaded shards change,
// "in <shard> <unix ns>" when a shard finished loading here, "call <key>
// <term> <start ns> <end ns>" for each fenced write that went through,
// "fenced <key>" for one the fence refused, and on SIGUSR1 its cache
// ("cache <key> <value>" lines, then "cache-end"). It leaves gracefully
// on SIGTERM.
func runShardMember(spec string) int {
	var s shardMemberSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "shard member:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := shardMember(ctx, s); err != nil {
		fmt.Fprintf(os.Stderr, "shard member %s: %v\n", s.ID, err)
		return 1
	}
	return 0
}

// memberOut serialises a member's report lines.
type memberOut struct{ mu sync.Mutex }

func (o *memberOut) printf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Printf(format+"\n", args...)
}

// memberObserver reports loaded shards and finished loads.
type memberObserver struct{ out *memberOut }

func (o memberObserver) Members([]shard.Member) {}
func (o memberObserver) Owned(shards map[int]uint64) {
	parts := make([]string, 0, len(shards))
	for sh, term := range shards {
		parts = append(parts, fmt.Sprintf("%d:%d", sh, term))
	}
	o.out.printf("owned %s", strings.Join(parts, ","))
}
func (o memberObserver) HandoffStarted(int, bool) {}
func (o memberObserver) HandoffDone(sh int, in bool, _ time.Duration, err error) {
	if in && err == nil {
		o.out.printf("in %d %d", sh, time.Now().UnixNano())
	}
}

func shardMember(ctx context.Context, s shardMemberSpec) error {
	// DBINFORMER_SHARD_LOG=debug (or info) shows what a member does.
	var level slog.Level = slog.LevelWarn
	_ = level.UnmarshalText([]byte(os.Getenv("DBINFORMER_SHARD_LOG")))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("member", s.ID)
	out := &memberOut{}
	opts := shard.Options{ID: s.ID, Shards: s.Shards, Lease: s.Lease, Logger: log, Observer: memberObserver{out}}
	if s.Kind == "kube" {
		cfg, err := clientcmd.BuildConfigFromFlags("", s.Conn)
		if err != nil {
			return err
		}
		// controller-runtime's defaults; see shard.NewKube.
		cfg.QPS, cfg.Burst = 20, 30
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		backend, err := shard.NewKube(cs, s.Prefix, "churn")
		if err != nil {
			return err
		}
		sh, err := shard.New(backend, opts)
		if err != nil {
			return err
		}
		lw, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps(s.Prefix), kubeinformer.Options{Namespace: s.Prefix})
		if err != nil {
			return err
		}
		// The Kubernetes API has no transaction spanning a Lease and
		// another object: no fence, every call counts.
		return runMember(ctx, s, log, out, sh, lw, configMapValue, nil)
	}
	if s.Kind == "relay" {
		return relayMember(ctx, s, log, out, opts)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(s.Conn, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer client.Close()
	backend, err := shard.NewEtcd(client, s.Prefix+"/shards")
	if err != nil {
		return err
	}
	sh, err := shard.New(backend, opts)
	if err != nil {
		return err
	}
	lw, err := etcdinformer.NewPrefix(ctx, client, s.Prefix+"/data", etcdinformer.Options[shardValue]{})
	if err != nil {
		return err
	}
	// The handler's work: copy the value to Prefix/out, fenced on the
	// shard's term.
	fenced := func(ctx context.Context, tk shard.Ticket, key string, v int64) (int64, error) {
		resp, err := client.Txn(ctx).If(backend.Fence(tk.Shard, tk.Term)).
			Then(clientv3.OpPut(s.Prefix+"/out/"+key, strconv.FormatInt(v, 10))).Commit()
		if err != nil || !resp.Succeeded {
			return 0, err
		}
		return resp.Header.Revision, nil
	}
	return runMember(ctx, s, log, out, sh, lw, func(v shardValue) int64 { return v.V }, fenced)
}

// relayMember is a member over a relay stream, its membership and fence
// in Postgres: the handler's write goes to the table Prefix_out in a
// transaction fenced on the shard's term (shard.Postgres.Fence), and the
// order of such writes is a sequence read after the fence (which locks the
// shard's ownership until the transaction ends).
func relayMember(ctx context.Context, s shardMemberSpec, log *slog.Logger, out *memberOut, opts shard.Options) error {
	pool, err := pgxpool.New(ctx, s.Conn)
	if err != nil {
		return err
	}
	defer pool.Close()
	backend, err := shard.NewPostgres(ctx, pool, s.Prefix)
	if err != nil {
		return err
	}
	sh, err := shard.New(backend, opts)
	if err != nil {
		return err
	}
	nc, js, err := dialJetStream(s.NATS, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer nc.Close()
	down, err := relay.NewDownstream[pgtest.Row](ctx, js, s.Stream, s.Prefix, relay.DownstreamOptions[pgtest.Row]{Logger: log, Shards: s.RelayShards})
	if err != nil {
		return err
	}
	outTable := pgx.Identifier{s.Prefix + "_out"}.Sanitize()
	fenced := func(ctx context.Context, tk shard.Ticket, key string, v int64) (int64, error) {
		var order int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := backend.Fence(ctx, tx, tk.Shard, tk.Term); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, "SELECT nextval($1)", s.Prefix+"_out_order").Scan(&order); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+outTable+" (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", key, v)
			return err
		})
		if errors.Is(err, shard.ErrFenced) {
			return 0, nil
		}
		return order, err
	}
	return runMember(ctx, s, log, out, sh, driver.ListerWatcher[pgtest.Row](down), func(r pgtest.Row) int64 { return r.V }, fenced)
}

// configMapValue is the churn's value in a ConfigMap.
func configMapValue(cm *corev1.ConfigMap) int64 {
	v, _ := strconv.ParseInt(cm.Data["v"], 10, 64)
	return v
}

// runMember runs one member's sharded informer over lw until ctx ends;
// write, when set, is the handler's fenced write, returning the revision
// it committed at (0: the fence refused it).
func runMember[T any](ctx context.Context, s shardMemberSpec, log *slog.Logger, out *memberOut, sh *shard.Sharder, lw driver.ListerWatcher[T], value func(T) int64, write func(context.Context, shard.Ticket, string, int64) (int64, error)) error {
	src, err := shard.NewSource[T](sh, lw)
	if err != nil {
		return err
	}
	inf := core.NewSharedIndexInformer[T](src, core.InformerOptions[T]{Name: "churn@" + s.ID, Logger: log})
	src.Bind(inf)
	work := func(tk shard.Ticket, key string, obj T) {
		start := time.Now().UnixNano()
		v := value(obj)
		var rev int64
		if write != nil {
			var err error
			rev, err = write(ctx, tk, key, v)
			switch {
			case err != nil:
				log.Warn("fenced write failed", "key", key, "err", err)
				return
			case rev == 0:
				out.printf("fenced %s", key)
				return
			}
		}
		out.printf("call %s %d %d %d %d %d", key, tk.Term, start, time.Now().UnixNano(), v, rev)
	}
	_, _ = inf.AddEventHandler(shard.Handler(sh, shard.HandlerFuncs[T]{
		AddFunc:    func(tk shard.Ticket, key string, obj T, _ bool) { work(tk, key, obj) },
		UpdateFunc: func(tk shard.Ticket, key string, _, obj T) { work(tk, key, obj) },
	}))
	dump := make(chan os.Signal, 1)
	signal.Notify(dump, syscall.SIGUSR1)
	defer signal.Stop(dump)
	ictx, icancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = inf.Run(ictx) })
	defer func() { icancel(); wg.Wait() }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		return err
	}
	wg.Go(func() {
		for {
			select {
			case <-dump:
				out.mu.Lock()
				for _, key := range inf.Indexer().ListKeys() {
					if obj, ok := inf.Indexer().Get(key); ok {
						fmt.Printf("cache %s %d\n", key, value(obj))
					}
				}
				fmt.Println("cache-end")
				out.mu.Unlock()
			case <-ictx.Done():
				return
			}
		}
	})
	// Run hands every shard off when ctx ends (SIGTERM), before the
	// informer stops.
	return sh.Run(ctx)
}

// shardValue is what the churn's keys hold.
type shardValue struct {
	V int64 `json:"v"`
}

// churnMember is a member process seen from the benchmark.
type churnMember struct {
	id    string
	cmd   *exec.Cmd
	done  chan struct{}
	cache chan map[string]int64 // its SIGUSR1 dumps
}

// churnState is what the members reported.
type churnState struct {
	mu     sync.Mutex
	owned  map[string]map[int]bool // member → its loaded shards
	loads  []churnLoad             // every shard load, in order
	calls  []churnCall
	fenced int
}

type churnLoad struct {
	member string
	shard  int
	at     int64
}

type churnCall struct {
	key, member string
	term        uint64
	start, end  int64
	value       int64
	rev         int64 // the revision its fenced write committed at (0: none)
}

func (st *churnState) start(b *testing.B, spec shardMemberSpec) *churnMember {
	cmd, out := startChild(b, shardMemberEnv, spec)
	m := &churnMember{id: spec.ID, cmd: cmd, done: make(chan struct{}), cache: make(chan map[string]int64, 1)}
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(out)
		var dump map[string]int64
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			st.mu.Lock()
			switch f[0] {
			case "owned":
				set := map[int]bool{}
				if len(f) > 1 {
					for _, p := range strings.Split(f[1], ",") {
						n, _ := strconv.Atoi(strings.SplitN(p, ":", 2)[0])
						set[n] = true
					}
				}
				st.owned[m.id] = set
			case "in":
				n, _ := strconv.Atoi(f[1])
				at, _ := strconv.ParseInt(f[2], 10, 64)
				st.loads = append(st.loads, churnLoad{member: m.id, shard: n, at: at})
			case "call":
				term, _ := strconv.ParseUint(f[2], 10, 64)
				s, _ := strconv.ParseInt(f[3], 10, 64)
				e, _ := strconv.ParseInt(f[4], 10, 64)
				v, _ := strconv.ParseInt(f[5], 10, 64)
				rev, _ := strconv.ParseInt(f[6], 10, 64)
				st.calls = append(st.calls, churnCall{key: f[1], member: m.id, term: term, start: s, end: e, value: v, rev: rev})
			case "fenced":
				st.fenced++
			case "cache":
				if dump == nil {
					dump = map[string]int64{}
				}
				v, _ := strconv.ParseInt(f[2], 10, 64)
				dump[f[1]] = v
			case "cache-end":
				if dump == nil {
					dump = map[string]int64{}
				}
				m.cache <- dump
				dump = nil
			}
			st.mu.Unlock()
		}
		_ = cmd.Wait()
		st.mu.Lock()
		delete(st.owned, m.id)
		st.mu.Unlock()
	}()
	return m
}

// settled waits until the live members have loaded, between them, every
// shard exactly as Assign gives it over their IDs.
func (st *churnState) settled(b *testing.B, shards int, live []*churnMember) {
	members := make([]shard.Member, len(live))
	for i, m := range live {
		members[i] = shard.Member{ID: m.id}
	}
	want, err := shard.Assign(shards, members)
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st.mu.Lock()
		ok := true
		for sh, owner := range want {
			for _, m := range live {
				if st.owned[m.id][sh] != (m.id == owner) {
					ok = false
				}
			}
		}
		st.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the shards did not settle on %v within 2 minutes", members)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// handoffP99 is the p99, over the shards loaded since t0 (unix ns), of
// the time from t0 to the load, s; and how many there were.
func (st *churnState) handoffP99(t0 int64) (float64, int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var ds []float64
	for _, l := range st.loads {
		if l.at >= t0 {
			ds = append(ds, float64(l.at-t0)/1e9)
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(0.99*float64(len(ds))))], len(ds)
}

// relayChurn is a Postgres table (pgtest's) read by one relay, in this
// process, into a stream on a single nats-server.
type relayChurn struct {
	pg   *harness.Postgres
	nsrv *harness.NATS
	h    *pgtest.Harness
	// shards, when positive, is the relay's Options.Shards: per-shard
	// subjects, each member's Downstream consuming only its shards'.
	shards int
}

func (c *relayChurn) setup(b *testing.B, n int) shardMemberSpec {
	ctx := context.Background()
	seq := shardChurnSeq.Add(1)
	c.h = pgtest.New(b, c.pg, pgtest.Options{})
	if err := c.h.Source().Close(); err != nil { // only its table and writes are used
		b.Fatal(err)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%04d", i)
	}
	if _, err := c.h.PutAll(ctx, keys, 0); err != nil {
		b.Fatal(err)
	}
	spec := shardMemberSpec{Kind: "relay", Conn: c.pg.ConnString(), NATS: c.nsrv.URL(), Stream: fmt.Sprintf("CHURN%d", seq), Prefix: fmt.Sprintf("churn%d", seq), RelayShards: c.shards}
	c.pg.Exec(b, fmt.Sprintf("CREATE TABLE %s_out (k text PRIMARY KEY, v bigint NOT NULL); CREATE SEQUENCE %s_out_order", spec.Prefix, spec.Prefix))
	if _, err := c.nsrv.JetStream(b).CreateStream(ctx, relay.StreamConfig(spec.Stream, spec.Prefix)); err != nil {
		b.Fatal(err)
	}
	// The relay: its own Source (a temporary slot) and a one-candidate
	// election, until the benchmark ends.
	rctx, cancel := context.WithCancel(ctx)
	src, err := pginformer.NewSource(rctx, c.pg.ConnString(), pginformer.Options{})
	if err != nil {
		b.Fatal(err)
	}
	table, err := pginformer.NewTable[pgtest.Row](rctx, src, c.h.TableName(), pginformer.TableOptions[pgtest.Row]{})
	if err != nil {
		b.Fatal(err)
	}
	el, err := leader.NewPostgres(c.pg.ConnString(), spec.Prefix+"-relay", leader.PostgresOptions{Identity: "relay"})
	if err != nil {
		b.Fatal(err)
	}
	r, err := relay.New(rctx, c.nsrv.JetStream(b), table, relay.Options[pgtest.Row]{Stream: spec.Stream, Prefix: spec.Prefix, Elector: el, Shards: c.shards})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	b.Cleanup(func() { cancel(); <-done; _ = src.Close() })
	return spec
}

func (c *relayChurn) put(ctx context.Context, i int, v int64) error {
	_, err := c.h.Put(ctx, fmt.Sprintf("k%04d", i), v)
	return err
}

func (c *relayChurn) truth(b *testing.B) map[string]int64 {
	t, err := c.h.Truth(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// churnShards is the churn's shard count.
const churnShards = 32

func runShardChurn(b *testing.B, src churnSource) {
	const shards = churnShards
	const lease = 3 * time.Second
	nkeys := size(1000, 200)
	rate := size(1000, 200)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec := src.setup(b, nkeys)
	spec.Shards, spec.Lease = shards, lease
	st := &churnState{owned: map[string]map[int]bool{}}
	var all []*churnMember
	n := 0
	join := func() *churnMember {
		spec.ID = fmt.Sprintf("m%d", n)
		m := st.start(b, spec)
		n++
		all = append(all, m)
		return m
	}
	defer func() {
		for _, m := range all {
			_ = m.cmd.Process.Signal(syscall.SIGCONT)
			_ = m.cmd.Process.Kill()
			<-m.done
		}
	}()

	// The writers: eight, each over an eighth of the keys (a key's values
	// rise); a write waits for its answer, and two fell short on kube.
	const nw = 8
	var written atomic.Int64
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	begin := time.Now()
	for j := range nw {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(j), 41))
			interval := nw * time.Second / time.Duration(rate)
			for i := 0; wctx.Err() == nil; i++ {
				if d := time.Until(begin.Add(time.Duration(i) * interval)); d > 0 {
					select {
					case <-time.After(d):
					case <-wctx.Done():
						return
					}
				}
				if err := src.put(ctx, nw*r.IntN(nkeys/nw)+j, written.Add(1)); err != nil && wctx.Err() == nil {
					b.Error(err)
					return
				}
			}
		})
	}
	defer func() { stopWriters(); wg.Wait() }()

	live := []*churnMember{join(), join(), join(), join()}
	st.settled(b, shards, live)
	type change struct {
		name  string
		p99   float64
		loads int
	}
	var changes []change
	// step makes a change at t0 and waits until the shards settled on
	// the members live after it.
	step := func(name string, do func() []*churnMember) {
		t0 := time.Now().UnixNano()
		live = do()
		st.settled(b, shards, live)
		p99, loads := st.handoffP99(t0)
		b.Logf("%s: %d shard loads, the last %.2fs after the change (p99)", name, loads, p99)
		changes = append(changes, change{name, p99, loads})
		time.Sleep(time.Duration(size(3, 1)) * time.Second) // writes on the new owners
	}
	send := func(m *churnMember, sig syscall.Signal) {
		if err := m.cmd.Process.Signal(sig); err != nil {
			b.Fatal(err)
		}
	}
	step("join", func() []*churnMember { return append(live, join(), join()) }) // 4 → 6
	step("leave", func() []*churnMember {                                       // 6 → 3, gracefully
		for _, m := range live[3:] {
			send(m, syscall.SIGTERM)
		}
		return live[:3]
	})
	step("kill", func() []*churnMember { send(live[2], syscall.SIGKILL); return live[:2] })
	step("rejoin", func() []*churnMember { return append(live, join()) })
	frozen := live[2]
	step("stop", func() []*churnMember { send(frozen, syscall.SIGSTOP); return live[:2] })
	// Thawed: it finds its lease lost, drops its shards and joins again.
	step("thaw", func() []*churnMember { send(frozen, syscall.SIGCONT); return append(live, frozen) })

	time.Sleep(time.Second) // writes on the final owners
	stopWriters()
	wg.Wait()
	elapsed := time.Since(begin)

	// The end: every key's last value reached a handler (the value of
	// its last call that went through), ...
	want := src.truth(b)
	var lost []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		st.mu.Lock()
		last := map[string]churnCall{}
		for _, c := range st.calls {
			if l, ok := last[c.key]; !ok || c.end > l.end {
				last[c.key] = c
			}
		}
		st.mu.Unlock()
		lost = lost[:0]
		for key, v := range want {
			if last[key].value != v {
				lost = append(lost, key)
			}
		}
		if len(lost) == 0 || time.Now().After(deadline) {
			break
		}
	}
	// ... and every key is cached by exactly one member, equal to the source.
	cached := map[string]int{}
	for _, m := range live {
		send(m, syscall.SIGUSR1)
		select {
		case dump := <-m.cache:
			for key, v := range dump {
				cached[key]++
				if want[key] != v {
					lost = append(lost, key)
				}
			}
		case <-time.After(time.Minute):
			b.Fatalf("member %s did not dump its cache", m.id)
		}
	}
	for key := range want {
		if cached[key] != 1 {
			lost = append(lost, key)
		}
	}
	slices.Sort(lost)
	lost = slices.Compact(lost)

	// Overlaps: two members' calls on one key at overlapping times.
	st.mu.Lock()
	byKey := map[string][]churnCall{}
	for _, c := range st.calls {
		byKey[c.key] = append(byKey[c.key], c)
	}
	calls, fenced := len(st.calls), st.fenced
	st.mu.Unlock()
	// Overlaps: with fenced writes, the order they committed in: a call
	// of one replica committed after a call of another under a later
	// term (a deposed owner's write landing after its successor's). By
	// wall time (wall-overlaps), execution intervals of two replicas that
	// overlap: all that can be checked without a fence, and what a
	// process frozen between its write's commit and its reply shows
	// (counted, not a fault, where the writes are fenced).
	overlaps, wallOverlaps, shared := 0, 0, 0
	fencedSource := false
	for key, cs := range byKey {
		slices.SortFunc(cs, func(a, b churnCall) int { return cmp.Compare(a.start, b.start) })
		var last churnCall
		several := false
		for i, c := range cs {
			fencedSource = fencedSource || c.rev > 0
			if i > 0 && c.member != cs[0].member {
				several = true
			}
			if i > 0 && c.member != last.member && c.start < last.end {
				wallOverlaps++
				if c.rev == 0 {
					overlaps++
					if overlaps <= 5 {
						b.Errorf("key %s handled by %s (term %d) until %v and by %s (term %d) from %v", key, last.member, last.term, time.Unix(0, last.end).Format(time.StampMicro), c.member, c.term, time.Unix(0, c.start).Format(time.StampMicro))
					}
				} else {
					b.Logf("key %s: calls of %s (term %d, written at revision %d) and %s (term %d, revision %d) overlap in wall time", key, last.member, last.term, last.rev, c.member, c.term, c.rev)
				}
			}
			if i == 0 || c.end > last.end {
				last = c
			}
		}
		if several {
			shared++
		}
		if fencedSource {
			slices.SortFunc(cs, func(a, b churnCall) int { return cmp.Compare(a.rev, b.rev) })
			var top churnCall
			for _, c := range cs {
				if c.term < top.term {
					overlaps++
					if overlaps <= 5 {
						b.Errorf("key %s: %s's write under term %d committed at revision %d, after %s's under term %d at revision %d", key, c.member, c.term, c.rev, top.member, top.term, top.rev)
					}
				}
				if c.term > top.term {
					top = c
				}
			}
		}
	}
	if len(lost) > 0 {
		b.Errorf("%d keys lost (their last value not copied by their owner, or not cached by exactly one member equal to the source), first %v", len(lost), lost[:min(5, len(lost))])
	}
	if shared == 0 {
		b.Error("no key was handled by two members in turn: the churn moved nothing")
	}
	b.Logf("%d calls (fenced: %v), %d refused by the fence, %d keys handled by several members in turn, %d overlaps, %d in wall time", calls, fencedSource, fenced, shared, overlaps, wallOverlaps)
	for _, c := range changes {
		b.ReportMetric(c.p99, c.name+"-handoff-p99-s")
	}
	b.ReportMetric(float64(overlaps), "overlaps")
	b.ReportMetric(float64(wallOverlaps), "wall-overlaps")
	b.ReportMetric(float64(len(lost)), "lost")
	b.ReportMetric(float64(shared), "shared-keys")
	b.ReportMetric(float64(fenced), "fenced-calls")
	b.ReportMetric(float64(written.Load())/elapsed.Seconds(), "offered-writes/s")
	b.ReportMetric(lease.Seconds(), "lease-s")
}
