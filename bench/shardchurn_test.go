package bench_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
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

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/shard"
)

// BenchmarkShardChurn (#41): sharded replicas, each a process of its own
// (this test binary re-executed: runShardMember), split the keys of an
// etcd prefix (1,000 keys; 200 under -short) with their membership and
// ownership in etcd too (shard.NewEtcd, a 3 s lease, 32 shards), while
// two writers put 1,000 changes a second in all (200 under -short). Each
// replica caches only its shards (shard.NewSource over the prefix) and
// its handler (shard.Handler) copies every change it is handed to
// /out/<key> in a transaction fenced on the shard's term
// (shard.Etcd.Fence), and reports each call whose write the fence let
// through: key, replica, term, start and end. The membership moves
// 4 → 6 (two join) → 3 (three leave, SIGTERM: graceful), then a member is
// killed (SIGKILL), one joins, and one is frozen (SIGSTOP; SIGCONT once
// its shards moved, when it finds its lease lost and joins again).
//
// Reported: for each change, the handoff time's p99 over the shards it
// moved (the change → the new owner has loaded the shard, s; targets
// ≤ 2 s graceful, ≤ lease + 2 s after the kill and the freeze); overlaps,
// the keys handled by two replicas at overlapping times (0); lost, the
// keys whose /out copy differs from /data at the end, or that are not
// cached by exactly one replica equal to /data (0); shared-keys, the keys
// handled by several replicas in turn (the churn moved work: more than 0).
func BenchmarkShardChurn(b *testing.B) {
	e := harness.StartEtcd(b)
	for range b.N {
		runShardChurn(b, e)
	}
}

// shardMemberEnv holds, in a re-executed test binary, the shard member to
// run (a JSON shardMemberSpec); see TestMain.
const shardMemberEnv = "DBINFORMER_SHARD_MEMBER"

type shardMemberSpec struct {
	ID, Endpoints, Prefix string
	Shards                int
	Lease                 time.Duration
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
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("member", s.ID)
	client, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(s.Endpoints, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer client.Close()
	backend, err := shard.NewEtcd(client, s.Prefix+"/shards")
	if err != nil {
		return err
	}
	out := &memberOut{}
	sh, err := shard.New(backend, shard.Options{ID: s.ID, Shards: s.Shards, Lease: s.Lease, Logger: log, Observer: memberObserver{out}})
	if err != nil {
		return err
	}
	lw, err := etcdinformer.NewPrefix(ctx, client, s.Prefix+"/data", etcdinformer.Options[shardValue]{})
	if err != nil {
		return err
	}
	src, err := shard.NewSource[shardValue](sh, lw)
	if err != nil {
		return err
	}
	inf := core.NewSharedIndexInformer[shardValue](src, core.InformerOptions[shardValue]{Name: "churn@" + s.ID, Logger: log})
	src.Bind(inf)
	work := func(tk shard.Ticket, key string, v shardValue) {
		start := time.Now().UnixNano()
		resp, err := client.Txn(ctx).If(backend.Fence(tk.Shard, tk.Term)).
			Then(clientv3.OpPut(s.Prefix+"/out/"+key, strconv.FormatInt(v.V, 10))).Commit()
		switch {
		case err != nil:
			log.Warn("fenced write failed", "key", key, "err", err)
		case resp.Succeeded:
			out.printf("call %s %d %d %d", key, tk.Term, start, time.Now().UnixNano())
		default:
			out.printf("fenced %s", key)
		}
	}
	_, _ = inf.AddEventHandler(shard.Handler(sh, shard.HandlerFuncs[shardValue]{
		AddFunc:    func(tk shard.Ticket, key string, v shardValue, _ bool) { work(tk, key, v) },
		UpdateFunc: func(tk shard.Ticket, key string, _, v shardValue) { work(tk, key, v) },
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
					if v, ok := inf.Indexer().Get(key); ok {
						fmt.Printf("cache %s %d\n", key, v.V)
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
}

func (st *churnState) start(b *testing.B, spec shardMemberSpec) *churnMember {
	js, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), shardMemberEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
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
				st.calls = append(st.calls, churnCall{key: f[1], member: m.id, term: term, start: s, end: e})
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

var shardChurnSeq atomic.Int64

func runShardChurn(b *testing.B, e *harness.Etcd) {
	const shards = 32
	const lease = 3 * time.Second
	nkeys := size(1000, 200)
	rate := size(1000, 200)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := e.Client(b)
	prefix := fmt.Sprintf("/churn%d", shardChurnSeq.Add(1))
	for i := range nkeys {
		if _, err := client.Put(ctx, fmt.Sprintf("%s/data/k%04d", prefix, i), `{"v":0}`); err != nil {
			b.Fatal(err)
		}
	}
	st := &churnState{owned: map[string]map[int]bool{}}
	var all []*churnMember
	n := 0
	join := func() *churnMember {
		m := st.start(b, shardMemberSpec{ID: fmt.Sprintf("m%d", n), Endpoints: strings.Join(e.Endpoints(), ","), Prefix: prefix, Shards: shards, Lease: lease})
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

	// The writers: two, each over half the keys (a key's values rise).
	var written atomic.Int64
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	begin := time.Now()
	for j := range 2 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(j), 41))
			interval := 2 * time.Second / time.Duration(rate)
			for i := 0; wctx.Err() == nil; i++ {
				if d := time.Until(begin.Add(time.Duration(i) * interval)); d > 0 {
					select {
					case <-time.After(d):
					case <-wctx.Done():
						return
					}
				}
				key := fmt.Sprintf("%s/data/k%04d", prefix, 2*r.IntN(nkeys/2)+j)
				if _, err := client.Put(ctx, key, fmt.Sprintf(`{"v":%d}`, written.Add(1))); err != nil && wctx.Err() == nil {
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

	// The end: every key's last value reached its owner's handler
	// (/out equals /data), ...
	resp, err := client.Get(ctx, prefix+"/data/", clientv3.WithPrefix())
	if err != nil {
		b.Fatal(err)
	}
	want := map[string]int64{}
	for _, kv := range resp.Kvs {
		var v shardValue
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			b.Fatal(err)
		}
		want[strings.TrimPrefix(string(kv.Key), prefix+"/data/")] = v.V
	}
	var lost []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get(ctx, prefix+"/out/", clientv3.WithPrefix())
		if err != nil {
			b.Fatal(err)
		}
		got := map[string]int64{}
		for _, kv := range resp.Kvs {
			got[strings.TrimPrefix(string(kv.Key), prefix+"/out/")], _ = strconv.ParseInt(string(kv.Value), 10, 64)
		}
		lost = lost[:0]
		for key, v := range want {
			if got[key] != v {
				lost = append(lost, key)
			}
		}
		if len(lost) == 0 || time.Now().After(deadline) {
			break
		}
	}
	// ... and every key is cached by exactly one member, equal to /data.
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
	overlaps, shared := 0, 0
	for key, cs := range byKey {
		slices.SortFunc(cs, func(a, b churnCall) int { return cmp.Compare(a.start, b.start) })
		var last churnCall
		several := false
		for i, c := range cs {
			if i > 0 && c.member != cs[0].member {
				several = true
			}
			if i > 0 && c.member != last.member && c.start < last.end {
				overlaps++
				if overlaps <= 5 {
					b.Errorf("key %s handled by %s (term %d) until %v and by %s (term %d) from %v", key, last.member, last.term, time.Unix(0, last.end).Format(time.StampMicro), c.member, c.term, time.Unix(0, c.start).Format(time.StampMicro))
				}
			}
			if i == 0 || c.end > last.end {
				last = c
			}
		}
		if several {
			shared++
		}
	}
	if len(lost) > 0 {
		b.Errorf("%d keys lost (their last value not copied by their owner, or not cached by exactly one member equal to the source), first %v", len(lost), lost[:min(5, len(lost))])
	}
	if shared == 0 {
		b.Error("no key was handled by two members in turn: the churn moved nothing")
	}
	b.Logf("%d fenced calls through, %d refused by the fence, %d keys handled by several members in turn, %d overlaps", calls, fenced, shared, overlaps)
	for _, c := range changes {
		b.ReportMetric(c.p99, c.name+"-handoff-p99-s")
	}
	b.ReportMetric(float64(overlaps), "overlaps")
	b.ReportMetric(float64(len(lost)), "lost")
	b.ReportMetric(float64(shared), "shared-keys")
	b.ReportMetric(float64(fenced), "fenced-calls")
	b.ReportMetric(float64(written.Load())/elapsed.Seconds(), "offered-writes/s")
	b.ReportMetric(lease.Seconds(), "lease-s")
}
