package bench_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
)

// BenchmarkRelayFailover (#38): the relay's leader fails under writes
// that never pause, for real: three relay replicas, each a process of
// its own (this test binary re-executed: runRelayReplica), campaign in
// one Postgres election (leader.NewPostgres at its default lease) and
// the leader reads the table over one permanent slot into a stream
// replicated on a 3-node JetStream cluster; four followers (informers
// over relay.NewDownstream, in this process, one per cluster node round
// robin) are measured. Two writers put one-row transactions at 1,000/s
// in all (200/s under -short) over 1,000 keys (200), each row stamped
// with the time it was sent. After a steady phase the leader's process
// is killed (SIGKILL), and after a window the new leader's process is
// frozen (SIGSTOP; SIGCONT once every follower applies changes again). For
// each fault: the failover gap (the signal → the first change sent after
// it applied on every follower, s), the follower lag (send → handler)
// p50 and p99 of the rows sent in the window after the takeover (a
// minute; 5 s under -short), the relists the replicas published from
// the fault to the window's end (a takeover resumes from the slot: 0),
// and the replication slots on the server at the window's end (1). Also
// the lag of the steady phase, the writers' achieved rate, the
// followers' Lists from the first fault on (relists from the stream: 0)
// and before it beyond their first (follower-startup-relists: a
// follower that lists a young stream at version 0 may find its first
// messages superseded and relist once, from the stream), and changes
// that took a key's version backwards in a follower's cache (0). At the
// end every follower's cache must equal the table, or the run fails.
func BenchmarkRelayFailover(b *testing.B) {
	pg := harness.StartPostgres(b)
	cl := harness.StartNATSCluster(b, 3)
	for range b.N {
		runRelayFailover(b, pg, cl, failoverRun{elect: "postgres", faults: []string{"kill", "stop", "walsender", "streamleader", "follower"}})
	}
}

// BenchmarkRelayFailoverElections (#38): BenchmarkRelayFailover's leader
// faults (kill -9, then SIGSTOP of the next leader) with the replicas
// campaigning in the other election backends at their default lease: an
// etcd lease (a real etcd server, embedded in this process) and a
// Kubernetes Lease (a real kube-apiserver). The windows after the
// takeovers are 30 s (BenchmarkRelayFailover's: a minute).
func BenchmarkRelayFailoverElections(b *testing.B) {
	pg := harness.StartPostgres(b)
	cl := harness.StartNATSCluster(b, 3)
	b.Run("etcd", func(b *testing.B) {
		e := harness.StartEtcd(b)
		for range b.N {
			runRelayFailover(b, pg, cl, failoverRun{elect: "etcd", conn: strings.Join(e.Endpoints(), ","), faults: []string{"kill", "stop"}, window: 30 * time.Second})
		}
	})
	b.Run("kube", func(b *testing.B) {
		k := harness.StartKube(b)
		for range b.N {
			runRelayFailover(b, pg, cl, failoverRun{elect: "kube", conn: k.Kubeconfig(), faults: []string{"kill", "stop"}, window: 30 * time.Second})
		}
	})
}

// failoverRun is what one run of runRelayFailover does: the replicas'
// election (relayReplicaSpec.Elect and ElectConn), the faults in order
// and the window measured after each (0: a minute after a takeover, half
// a minute after the other faults; 5 s under -short).
//
//   - kill: SIGKILL of the leading replica's process;
//   - stop: SIGSTOP of the leading replica's process, SIGCONT once every
//     follower applied a change sent after it (it must find itself
//     deposed);
//   - walsender: pg_terminate_backend of the walsender streaming the
//     relay's slot (the leader reconnects; no takeover);
//   - streamleader: the nats-server leading the relay stream is shut down
//     (the stream elects another leader among the two left; the leader's
//     publisher and the followers connected to that node reconnect to
//     another), and started again once every follower applied a change
//     sent after it;
//   - follower: one follower's informer is stopped and a new one started
//     over a new Downstream (a restarted follower process, listing from
//     the stream: its own List is not counted as a relist).
type failoverRun struct {
	elect, conn string
	faults      []string
	window      time.Duration
}

// relayReplicaEnv holds, in a re-executed test binary, the relay replica
// to run (a JSON relayReplicaSpec); see TestMain.
const relayReplicaEnv = "DBINFORMER_RELAY_REPLICA"

type relayReplicaSpec struct {
	ID, Conn, NATS, Table, Stream, Prefix, Slot, Election string
	// Elect is the election's backend: "postgres" (Conn), "etcd"
	// (ElectConn: its endpoints, comma-separated) or "kube" (ElectConn:
	// a kubeconfig file), each at its default lease.
	Elect, ElectConn string
}

// runRelayReplica is a relay replica's process, as examples/relay runs
// one: a Source over the permanent slot, a relay campaigning in the
// Postgres election. It reports its transitions on stdout, one line
// each ("leading <epoch>", "following <epoch>", "relisted <changed>
// <listed>", "restarted <err>"), and ends on SIGTERM.
func runRelayReplica(spec string) int {
	var s relayReplicaSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "relay replica:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := relayReplica(ctx, s); err != nil {
		fmt.Fprintf(os.Stderr, "relay replica %s: %v\n", s.ID, err)
		return 1
	}
	return 0
}

func relayReplica(ctx context.Context, s relayReplicaSpec) error {
	// Its transitions and what it did about them (term starts, resumes,
	// relists and why) on stderr, which the benchmark passes on.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", s.ID)
	src, err := pginformer.NewSource(ctx, s.Conn, pginformer.Options{PermanentSlot: true, Slot: s.Slot, Logger: log})
	if err != nil {
		return err
	}
	defer src.Close()
	table, err := pginformer.NewTable[pgtest.Row](ctx, src, s.Table, pginformer.TableOptions[pgtest.Row]{})
	if err != nil {
		return err
	}
	nc, js, err := dialJetStream(s.NATS, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer nc.Close()
	el, closeEl, err := failoverElector(s)
	if err != nil {
		return err
	}
	defer closeEl()
	r, err := relay.New(ctx, js, table, relay.Options[pgtest.Row]{Stream: s.Stream, Prefix: s.Prefix, Elector: el, Metrics: &replicaReport{}, Logger: log})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// failoverElector is the election a replica campaigns in (see
// relayReplicaSpec.Elect); close releases its client.
func failoverElector(s relayReplicaSpec) (leader.Elector, func(), error) {
	switch s.Elect {
	case "etcd":
		client, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(s.ElectConn, ","), DialTimeout: 5 * time.Second})
		if err != nil {
			return nil, nil, err
		}
		el, err := leader.NewEtcd(client, "/"+s.Election, leader.EtcdOptions{Identity: s.ID})
		if err != nil {
			_ = client.Close()
			return nil, nil, err
		}
		return el, func() { _ = client.Close() }, nil
	case "kube":
		cfg, err := clientcmd.BuildConfigFromFlags("", s.ElectConn)
		if err != nil {
			return nil, nil, err
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, nil, err
		}
		el, err := leader.NewKube(client, "default", s.Election, leader.KubeOptions{Identity: s.ID})
		return el, func() {}, err
	}
	el, err := leader.NewPostgres(s.Conn, s.Election, leader.PostgresOptions{Identity: s.ID})
	return el, func() {}, err
}

// replicaReport prints a replica's transitions for the benchmark.
type replicaReport struct {
	relay.NoopMetrics
	mu sync.Mutex
}

func (p *replicaReport) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Printf(format+"\n", args...)
}

func (p *replicaReport) Leading(on bool, epoch uint64) {
	if on {
		p.printf("leading %d", epoch)
	} else {
		p.printf("following %d", epoch)
	}
}
func (p *replicaReport) Relisted(changed, listed int) { p.printf("relisted %d %d", changed, listed) }
func (p *replicaReport) TermRestarted(err error) {
	p.printf("restarted %s", strings.ReplaceAll(err.Error(), "\n", " "))
}

// replicaProc is a relay replica's process, seen from the benchmark.
type replicaProc struct {
	id   int
	cmd  *exec.Cmd
	done chan struct{}
}

// replicaSet tracks the replicas' reports.
type replicaSet struct {
	mu      sync.Mutex
	procs   []*replicaProc
	leader  int    // index of the replica that last said it leads, -1 none
	epoch   uint64 // its epoch
	relists atomic.Int64
	changed chan struct{} // closed and replaced on every leadership report
}

func (s *replicaSet) start(b testing.TB, spec relayReplicaSpec) {
	id := len(s.procs)
	spec.ID = fmt.Sprintf("replica-%d", id)
	cmd, out := startChild(b, relayReplicaEnv, spec)
	p := &replicaProc{id: id, cmd: cmd, done: make(chan struct{})}
	s.procs = append(s.procs, p)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			verb, arg, _ := strings.Cut(sc.Text(), " ")
			switch verb {
			case "leading":
				epoch, _ := strconv.ParseUint(arg, 10, 64)
				s.mu.Lock()
				if epoch >= s.epoch {
					s.leader, s.epoch = id, epoch
				}
				close(s.changed)
				s.changed = make(chan struct{})
				s.mu.Unlock()
			case "relisted":
				s.relists.Add(1)
			}
		}
		_ = cmd.Wait()
	}()
}

// waitLeader waits for a leader of an epoch above after and returns it.
func (s *replicaSet) waitLeader(b testing.TB, after uint64) (int, uint64) {
	deadline := time.After(2 * time.Minute)
	for {
		s.mu.Lock()
		l, e, ch := s.leader, s.epoch, s.changed
		s.mu.Unlock()
		if l >= 0 && e > after {
			return l, e
		}
		select {
		case <-ch:
		case <-deadline:
			b.Fatalf("no relay replica leads (an epoch above %d) after 2 minutes", after)
		}
	}
}

// stop ends every replica: SIGCONT (a frozen one), SIGTERM, and SIGKILL
// if it has not ended within 20 s.
func (s *replicaSet) stop() {
	for _, p := range s.procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range s.procs {
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// lagSample is one row applied on one follower: when it was sent, and
// how long after that the follower's handler saw it.
type lagSample struct {
	sent int64 // unix ns
	lag  float64
}

// failoverFollower is one measured follower.
type failoverFollower struct {
	inf        *core.SharedIndexInformer[pgtest.Row]
	firstAfter atomic.Int64 // when it first applied a row sent after the fault (unix ns)
	stop       func()       // stops the informer and waits for its Run
	done       chan struct{}
}

// waitStopped waits until process pid is stopped (state T in
// /proc/<pid>/stat); where there is no /proc it returns at once.
func waitStopped(tb testing.TB, pid int) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// pid (comm) state ...: comm may hold spaces, the state follows
		// its closing parenthesis.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'T' {
			return
		}
	}
	tb.Fatalf("process %d did not stop within 10 s of SIGSTOP", pid)
}

// failoverJetStream is a JetStream context on a connection to node first
// that knows the others' addresses, as a client of a real cluster would
// be configured: when node first is shut down it reconnects to another.
func failoverJetStream(tb testing.TB, cl *harness.NATSCluster, first int) jetstream.JetStream {
	tb.Helper()
	urls := strings.Split(cl.URLs(), ",")
	urls = append(urls[first:], urls[:first]...)
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.DontRandomize())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// faultSample is what one fault measured.
type faultSample struct {
	gap, p50, p99  float64
	relists, slots int
}

var relayFailoverSeq atomic.Int64

func runRelayFailover(b *testing.B, pg *harness.Postgres, cl *harness.NATSCluster, run failoverRun) {
	sc := &scope{TB: b}
	defer sc.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rate := size(1000, 200)
	nkeys := size(1000, 200)
	steady := time.Duration(size(30, 5)) * time.Second
	window := time.Duration(size(60, 5)) * time.Second
	if run.window > 0 {
		window = time.Duration(size(int(run.window), int(window)))
	}
	// DBINFORMER_FAILOVER_FAULTS=streamleader,follower runs only those
	// (to look into one).
	if v := os.Getenv("DBINFORMER_FAILOVER_FAULTS"); v != "" {
		run.faults = strings.Split(v, ",")
	}

	n := relayFailoverSeq.Add(1)
	h := pgtest.New(sc, pg, pgtest.Options{})
	// The harness's own Source (its temporary slot) is not the relay's:
	// only its writes and reads (direct connections) are used.
	if err := h.Source().Close(); err != nil {
		b.Fatal(err)
	}
	spec := relayReplicaSpec{
		Conn: pg.ConnString(), NATS: cl.URLs(), Table: h.TableName(),
		Stream: fmt.Sprintf("FAILOVER%d", n), Prefix: fmt.Sprintf("failover%d", n),
		Slot: fmt.Sprintf("bench_failover_%d", n), Election: fmt.Sprintf("bench-failover-%d", n),
		Elect: run.elect, ElectConn: run.conn,
	}
	cfg := relay.StreamConfig(spec.Stream, spec.Prefix)
	cfg.Replicas = 3
	if _, err := cl.JetStream(sc, 0).CreateStream(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	sc.Cleanup(func() {
		// The slot would hold the WAL for the benchmarks that follow.
		if err := pgtest.DropSlot(context.Background(), pg.ConnString(), spec.Slot); err != nil {
			b.Errorf("drop the relay's slot: %v", err)
		}
		pg.Exec(b, "DROP PUBLICATION IF EXISTS "+spec.Slot)
	})

	reps := &replicaSet{leader: -1, changed: make(chan struct{})}
	sc.Cleanup(reps.stop) // runs before the slot is dropped
	for range 3 {
		reps.start(sc, spec)
	}
	_, epoch := reps.waitLeader(b, 0)

	// The followers.
	var (
		mu        sync.Mutex
		samples   []lagSample
		faultNs   atomic.Int64
		backwards atomic.Int64
		lists     atomic.Int64
		followers []*failoverFollower
		wg        sync.WaitGroup
	)
	const nf = 4
	// startFollower starts follower i: an informer over a Downstream on a
	// connection that knows every node, node i%3 first.
	startFollower := func(i int, lists *atomic.Int64) *failoverFollower {
		d, err := relay.NewDownstream[pgtest.Row](ctx, failoverJetStream(sc, cl, i%3), spec.Stream, spec.Prefix, relay.DownstreamOptions[pgtest.Row]{})
		if err != nil {
			b.Fatal(err)
		}
		f := &failoverFollower{done: make(chan struct{})}
		f.inf = core.NewSharedIndexInformer[pgtest.Row](countingDown{d, lists}, core.InformerOptions[pgtest.Row]{Name: fmt.Sprintf("follower-%d", i)})
		rec := func(r pgtest.Row) {
			now := time.Now().UnixNano()
			if t := faultNs.Load(); t != 0 && r.V > t {
				f.firstAfter.CompareAndSwap(0, now)
			}
			mu.Lock()
			samples = append(samples, lagSample{sent: r.V, lag: float64(now-r.V) / 1e6})
			mu.Unlock()
		}
		_, _ = f.inf.AddEventHandler(core.ResourceEventHandlerFuncs[pgtest.Row]{
			AddFunc: func(_ string, r pgtest.Row, _ bool) { rec(r) },
			UpdateFunc: func(_ string, old, r pgtest.Row) {
				if r.V < old.V {
					backwards.Add(1)
				}
				rec(r)
			},
		})
		fctx, fcancel := context.WithCancel(ctx)
		f.stop = func() { fcancel(); <-f.done }
		wg.Go(func() { defer close(f.done); _ = f.inf.Run(fctx) })
		return f
	}
	for i := range nf {
		followers = append(followers, startFollower(i, &lists))
	}
	defer wg.Wait()
	defer cancel()
	for _, f := range followers {
		if err := f.inf.WaitForCacheSync(ctx); err != nil {
			b.Fatal(err)
		}
	}

	// The writers: one-row transactions at rate in all, until stopped.
	// Two, each on its own half of the keys (so that a key's versions
	// still rise with its sends): one alone, a round trip per commit,
	// fell 3-6% short of 1,000/s here.
	const nw = 2
	wctx, stopWriter := context.WithCancel(ctx)
	type written struct {
		last    core.ResourceVersion
		n       int
		elapsed time.Duration
		err     error
	}
	wres := make(chan written, nw)
	for j := range nw {
		go func() {
			var w written
			interval := time.Second * nw / time.Duration(rate)
			start := time.Now()
			for i := 0; ; i++ {
				if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
					select {
					case <-time.After(d):
					case <-wctx.Done():
					}
				}
				if wctx.Err() != nil {
					break
				}
				rv, err := h.Put(ctx, "k"+strconv.Itoa((i*nw+j)%nkeys), time.Now().UnixNano())
				if err != nil {
					w.err = err
					break
				}
				w.last, w.n = rv, w.n+1
			}
			w.elapsed = time.Since(start)
			wres <- w
		}()
	}
	// stopWriters stops both and sums them up: the last version is the
	// later one's.
	stopWriters := func() written {
		stopWriter()
		var all written
		for range nw {
			w := <-wres
			all.last = max(all.last, w.last)
			all.n += w.n
			all.elapsed = max(all.elapsed, w.elapsed)
			if all.err == nil {
				all.err = w.err
			}
		}
		return all
	}
	writing := true
	defer func() {
		if writing {
			stopWriters()
		}
	}()

	steadyFrom := time.Now().UnixNano()
	time.Sleep(steady)
	steadyTo := time.Now().UnixNano()

	// A follower that started on a young stream may relist from it once
	// (see the report); the failovers' own are counted from here.
	lists0 := lists.Load()
	type span struct{ from, to int64 }
	var faults []faultSample
	var windows []span
	var restartLists atomic.Int64 // the restarted followers' Lists (the first of each is its start)
	restarts := int64(0)
	var t0 time.Time // when the fault under way was injected
	// inject starts fault name and returns what heals it once every
	// follower applied a change sent after it (nil: nothing), and the
	// victim's description for the log.
	inject := func(name string) (heal func(), victim string) {
		reps.mu.Lock()
		lead := reps.procs[reps.leader]
		reps.mu.Unlock()
		switch name {
		case "kill", "stop":
			sig := map[string]syscall.Signal{"kill": syscall.SIGKILL, "stop": syscall.SIGSTOP}[name]
			if err := lead.cmd.Process.Signal(sig); err != nil {
				b.Fatal(err)
			}
			victim = fmt.Sprintf("%v of replica-%d (pid %d)", sig, lead.id, lead.cmd.Process.Pid)
			// A signal takes effect when the process is next scheduled:
			// the fault starts once it is gone or stopped, so that a
			// change it still published in between is not taken for the
			// new leader's (one kube SIGSTOP gap read 2 ms, and its
			// takeover fell inside the lag window).
			if sig == syscall.SIGKILL {
				<-lead.done
			} else {
				waitStopped(b, lead.cmd.Process.Pid)
			}
			t0 = time.Now()
			faultNs.Store(t0.UnixNano())
			// A follower may have applied a row the leader published
			// between the first clock and this one: it is not the new
			// leader's (two SIGSTOP gaps read as negative, and their
			// lag windows started before the takeover, holding the
			// stall). Cleared after the new clock is set, so that no
			// row sent before it counts again.
			for _, f := range followers {
				f.firstAfter.Store(0)
			}
			if sig == syscall.SIGSTOP {
				// Thawed after the takeover: it must find itself deposed.
				heal = func() {
					if err := lead.cmd.Process.Signal(syscall.SIGCONT); err != nil {
						b.Fatal(err)
					}
				}
			}
		case "walsender":
			// The slot's walsender may be between connections: wait for it.
			var pid int32
			for deadline := time.Now().Add(time.Minute); pid == 0; time.Sleep(10 * time.Millisecond) {
				if err := pg.Conn(sc).QueryRow(ctx, "SELECT coalesce((SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active), 0)", spec.Slot).Scan(&pid); err != nil {
					b.Fatal(err)
				}
				if pid == 0 && time.Now().After(deadline) {
					b.Fatalf("the relay's slot %s has had no walsender for a minute", spec.Slot)
				}
			}
			var ok bool
			if err := pg.Conn(sc).QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
				b.Fatalf("terminate the walsender %d: %v, %v", pid, ok, err)
			}
			victim = fmt.Sprintf("pg_terminate_backend of the slot's walsender (pid %d)", pid)
		case "streamleader":
			i := cl.WaitStreamLeader(sc, spec.Stream)
			cl.Nodes[i].Stop()
			victim = fmt.Sprintf("shutdown of nats-server %d, the stream's leader", i)
			heal = func() {
				cl.Nodes[i].Restart(sc)
				cl.WaitReady(sc)
			}
		case "follower":
			followers[0].stop()
			stopped := time.Since(t0)
			followers[0] = startFollower(0, &restartLists)
			restarts++
			if err := followers[0].inf.WaitForCacheSync(ctx); err != nil {
				b.Fatal(err)
			}
			victim = fmt.Sprintf("a restart of follower 0 (a new informer over a new Downstream; the old one stopped in %v, the new one synced %v later)",
				stopped.Round(time.Millisecond), (time.Since(t0) - stopped).Round(time.Millisecond))
		default:
			b.Fatalf("no fault %q", name)
		}
		return heal, victim
	}
	for _, name := range run.faults {
		for _, f := range followers {
			f.firstAfter.Store(0)
		}
		relists0 := reps.relists.Load()
		t0 = time.Now()
		faultNs.Store(t0.UnixNano())
		heal, victim := inject(name)
		// The gap: until every follower applied a row sent after the fault.
		deadline := t0.Add(2 * time.Minute)
		var back int64
		for {
			back = 0
			for _, f := range followers {
				t := f.firstAfter.Load()
				if t == 0 {
					back = -1
					break
				}
				back = max(back, t)
			}
			if back > 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: followers applied nothing sent after it for 2 minutes", victim)
			}
			time.Sleep(5 * time.Millisecond)
		}
		faultNs.Store(0)
		if name == "kill" || name == "stop" {
			var next int
			next, epoch = reps.waitLeader(b, epoch)
			b.Logf("%s: replica-%d leads (epoch %d); every follower applied a row sent after the fault %v later", victim, next, epoch, time.Unix(0, back).Sub(t0).Round(time.Millisecond))
		} else {
			b.Logf("%s: every follower applied a row sent after the fault %v later", victim, time.Unix(0, back).Sub(t0).Round(time.Millisecond))
		}
		if heal != nil {
			heal()
		}
		from := back
		win := window
		if name != "kill" && name != "stop" {
			win = min(window, 30*time.Second) // not a takeover: half a minute
		}
		time.Sleep(time.Until(time.Unix(0, from).Add(win)))
		windows = append(windows, span{from, from + int64(win)})
		var slots int
		var names string
		if err := pg.Conn(sc).QueryRow(ctx, "SELECT count(*), coalesce(string_agg(slot_name || CASE WHEN temporary THEN ' (temporary)' ELSE '' END, ', '), '') FROM pg_replication_slots").Scan(&slots, &names); err != nil {
			b.Fatal(err)
		}
		b.Logf("replication slots after the %s: %s", name, names)
		faults = append(faults, faultSample{
			gap:     float64(back-t0.UnixNano()) / 1e9,
			relists: int(reps.relists.Load() - relists0),
			slots:   slots,
		})
	}

	// The end: every follower reaches the last write and equals the table.
	w := stopWriters()
	writing = false
	if w.err != nil {
		b.Fatal(w.err)
	}
	ectx, ecancel := context.WithTimeout(ctx, 2*time.Minute)
	defer ecancel()
	for i, f := range followers {
		if err := f.inf.WaitFor(ectx, w.last); err != nil {
			b.Fatalf("follower %d did not reach the last write: %v", i, err)
		}
	}
	truth, err := h.Truth(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for i, f := range followers {
		got := map[string]int64{}
		for _, r := range f.inf.Indexer().List() {
			got[r.K] = r.V
		}
		bad := 0
		for k, v := range truth {
			if got[k] != v {
				bad++
			}
		}
		if bad > 0 || len(got) != len(truth) {
			b.Fatalf("follower %d: the cache holds %d keys, the table %d, %d differ", i, len(got), len(truth), bad)
		}
	}
	if n := backwards.Load(); n > 0 {
		b.Errorf("%d changes took a key's version backwards in a follower's cache", n)
	}

	mu.Lock()
	all := samples
	mu.Unlock()
	pcts := func(from, to int64) (float64, float64) {
		var lags []float64
		for _, s := range all {
			if s.sent >= from && s.sent < to {
				lags = append(lags, s.lag)
			}
		}
		if len(lags) == 0 {
			b.Fatalf("no row sent in [%v, %v) reached a follower", time.Unix(0, from), time.Unix(0, to))
		}
		slices.Sort(lags)
		return lags[len(lags)/2], lags[min(len(lags)-1, int(0.99*float64(len(lags))))]
	}
	sp50, sp99 := pcts(steadyFrom, steadyTo)
	b.ReportMetric(sp50, "steady-lag-p50-ms")
	b.ReportMetric(sp99, "steady-lag-p99-ms")
	for i, name := range run.faults {
		f := faults[i]
		f.p50, f.p99 = pcts(windows[i].from, windows[i].to)
		b.ReportMetric(f.gap, name+"-gap-s")
		b.ReportMetric(f.p50, name+"-lag-p50-ms")
		b.ReportMetric(f.p99, name+"-lag-p99-ms")
		b.ReportMetric(float64(f.relists), name+"-relists")
		b.ReportMetric(float64(f.slots), name+"-slots")
	}
	b.ReportMetric(float64(w.n)/w.elapsed.Seconds(), "offered-tx/s")
	b.ReportMetric(float64(lists.Load()-lists0+max(restartLists.Load()-restarts, 0)), "follower-relists")
	b.ReportMetric(float64(max(lists0-nf, 0)), "follower-startup-relists")
	b.ReportMetric(float64(backwards.Load()), "backwards")
}
