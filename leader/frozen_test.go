package leader_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// childEnv holds, in a re-executed test binary, the kind of candidate to
// run and its connection ("postgres <conn string>"); the child prints
// "leading <epoch>" once elected.
const childEnv = "LEADER_TEST_CHILD"

// runChild is a candidate in a process of its own, so that a test can
// freeze all of it (SIGSTOP) as an operator, a stalled VM or a debugger
// would: nothing of it runs, and its connections stay open.
func runChild() int {
	kind, conn, _ := strings.Cut(os.Getenv(childEnv), " ")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var el leader.Elector
	var err error
	switch kind {
	case "postgres":
		el, err = leader.NewPostgres(conn, "frozen", leader.PostgresOptions{Identity: "child", Lease: 2 * time.Second})
	case "etcd":
		var client *clientv3.Client
		client, err = clientv3.New(clientv3.Config{Endpoints: []string{conn}, DialTimeout: 5 * time.Second})
		if err != nil {
			break
		}
		defer client.Close()
		el, err = leader.NewEtcd(client, "/frozen", leader.EtcdOptions{Identity: "child", TTL: 2 * time.Second})
	case "kube":
		var cfg *rest.Config
		if cfg, err = clientcmd.BuildConfigFromFlags("", conn); err != nil {
			break
		}
		var client kubernetes.Interface
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			break
		}
		el, err = leader.NewKube(client, "default", "frozen", leader.KubeOptions{Identity: "child", LeaseDuration: 2 * time.Second})
	default:
		err = fmt.Errorf("unknown candidate kind %q", kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	err = el.Run(ctx, func(lctx context.Context, t leader.Term) error {
		fmt.Printf("leading %d\n", t.Epoch)
		<-lctx.Done()
		fmt.Printf("lost %d\n", t.Epoch)
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startChild runs a candidate in a child process and waits until it
// leads; the child is killed when the test ends.
func startChild(t *testing.T, env string) (*os.Process, uint64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+env)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var epoch uint64
		if _, err := fmt.Sscanf(sc.Text(), "leading %d", &epoch); err == nil {
			go func() {
				for sc.Scan() {
				}
			}()
			return cmd.Process, epoch
		}
	}
	t.Fatalf("the child candidate ended before it led: %v", sc.Err())
	return nil, 0
}

// A frozen leader — its process stopped, its connection open — is deposed
// by the server within the lease, and another candidate leads: the
// advisory lock alone would stay held by the frozen session forever.
func TestPostgresFrozenLeader(t *testing.T) {
	pg := harness.StartPostgres(t)
	child, epoch := startChild(t, "postgres "+pg.ConnString())
	var electors []leader.Elector
	for i := range 2 {
		el, err := leader.NewPostgres(pg.ConnString(), "frozen", leader.PostgresOptions{Identity: fmt.Sprintf("pg-%d", i), Lease: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		electors = append(electors, el)
	}
	g := startGroup(t, electors)
	start := time.Now()
	if err := child.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next := g.current(t, epoch)
	t.Logf("frozen leader (epoch %d) replaced by %s (epoch %d) after %v", epoch, next.Identity, next.Epoch, time.Since(start))
}

// A frozen etcd leader stops keeping its session lease alive: etcd
// deletes its key once the TTL runs out, and another candidate leads.
func TestEtcdFrozenLeader(t *testing.T) {
	e := harness.StartEtcd(t)
	child, epoch := startChild(t, "etcd "+e.Endpoints()[0])
	client := e.Client(t)
	var electors []leader.Elector
	for i := range 2 {
		el, err := leader.NewEtcd(client, "/frozen", leader.EtcdOptions{Identity: fmt.Sprintf("etcd-%d", i), TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		electors = append(electors, el)
	}
	g := startGroup(t, electors)
	start := time.Now()
	if err := child.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next := g.current(t, epoch)
	t.Logf("frozen leader (epoch %d) replaced by %s (epoch %d) after %v", epoch, next.Identity, next.Epoch, time.Since(start))
}

// A frozen Kubernetes leader stops renewing its Lease: another candidate
// takes it once LeaseDuration has passed since the last renewal.
func TestKubeFrozenLeader(t *testing.T) {
	k := harness.StartKube(t)
	child, epoch := startChild(t, "kube "+k.Kubeconfig())
	client := k.Client(t)
	var electors []leader.Elector
	for i := range 2 {
		el, err := leader.NewKube(client, "default", "frozen", leader.KubeOptions{Identity: fmt.Sprintf("kube-%d", i), LeaseDuration: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		electors = append(electors, el)
	}
	g := startGroup(t, electors)
	start := time.Now()
	if err := child.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next := g.current(t, epoch)
	t.Logf("frozen leader (epoch %d) replaced by %s (epoch %d) after %v", epoch, next.Identity, next.Epoch, time.Since(start))
}
