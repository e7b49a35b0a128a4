package leader_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// group runs n candidates of one election and records their terms.
type group struct {
	mu      sync.Mutex
	leading map[string]leader.Term // identity -> current term
	terms   []leader.Term          // every term, in the order started
	causes  map[uint64]error       // epoch -> cause of the lead context's end
	overlap bool                   // two leaders at once, by their own view

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
}

func startGroup(t *testing.T, electors []leader.Elector) *group {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &group{leading: map[string]leader.Term{}, causes: map[uint64]error{}, cancel: cancel, errs: make(chan error, len(electors))}
	for _, e := range electors {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.errs <- e.Run(ctx, func(lctx context.Context, term leader.Term) error {
				g.mu.Lock()
				g.leading[term.Identity] = term
				g.terms = append(g.terms, term)
				g.mu.Unlock()
				<-lctx.Done()
				g.mu.Lock()
				delete(g.leading, term.Identity)
				g.causes[term.Epoch] = context.Cause(lctx)
				g.mu.Unlock()
				return nil
			})
		}()
	}
	t.Cleanup(g.stop)
	return g
}

func (g *group) stop() {
	g.cancel()
	g.wg.Wait()
}

// current waits until exactly one candidate leads and returns its term.
func (g *group) current(t *testing.T, after uint64) leader.Term {
	t.Helper()
	var cur leader.Term
	informertest.Eventually(t, fmt.Sprintf("one leader with an epoch above %d", after), func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.leading) != 1 {
			return false
		}
		for _, term := range g.leading {
			cur = term
		}
		return cur.Epoch > after
	})
	return cur
}

func (g *group) cause(epoch uint64) (error, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.causes[epoch]
	return c, ok
}

// exercise runs three candidates, kills the leader's hold twice with kill,
// and checks: one leader at a time in steady state, the deposed leader's
// context ends with ErrLost, the next leader's epoch is higher, and Run
// returns nil with every goroutine gone when the context ends.
func exercise(t *testing.T, electors []leader.Elector, kill func(t *testing.T, term leader.Term)) {
	g := startGroup(t, electors)
	prev := g.current(t, 0)
	for round := range 2 {
		start := time.Now()
		kill(t, prev)
		informertest.Eventually(t, fmt.Sprintf("round %d: the deposed leader %s's context to end", round, prev.Identity), func() bool {
			_, ok := g.cause(prev.Epoch)
			return ok
		})
		t.Logf("round %d: deposed leader (epoch %d) stopped after %v", round, prev.Epoch, time.Since(start))
		if c, _ := g.cause(prev.Epoch); !errors.Is(c, leader.ErrLost) {
			t.Fatalf("round %d: the deposed leader's context ended with %v, want ErrLost", round, c)
		}
		next := g.current(t, prev.Epoch)
		t.Logf("round %d: new leader %s epoch %d after %v", round, next.Identity, next.Epoch, time.Since(start))
		prev = next
	}
	g.stop()
	for range electors {
		if err := <-g.errs; err != nil {
			t.Fatalf("Run returned %v after its context ended, want nil", err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.leading) != 0 {
		t.Fatalf("still leading after Run returned: %v", g.leading)
	}
	for i := 1; i < len(g.terms); i++ {
		if g.terms[i].Epoch <= g.terms[i-1].Epoch {
			t.Fatalf("term %d has epoch %d, not above the previous %d", i, g.terms[i].Epoch, g.terms[i-1].Epoch)
		}
	}
}

func TestEtcd(t *testing.T) {
	e := harness.StartEtcd(t)
	client := e.Client(t)
	var electors []leader.Elector
	for i := range 3 {
		el, err := leader.NewEtcd(client, "/test/leader", leader.EtcdOptions{Identity: fmt.Sprintf("etcd-%d", i), TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		electors = append(electors, el)
	}
	exercise(t, electors, func(t *testing.T, term leader.Term) {
		// Revoke the leader's session lease, as etcd does when the leader
		// stops keeping it alive.
		ctx := context.Background()
		resp, err := client.Get(ctx, "/test/leader", clientv3.WithFirstCreate()...)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != term.Identity {
			t.Fatalf("leader key: %v, want %s", resp.Kvs, term.Identity)
		}
		if _, err := client.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPostgres(t *testing.T) {
	pg := harness.StartPostgres(t)
	var electors []leader.Elector
	for i := range 3 {
		el, err := leader.NewPostgres(pg.ConnString(), "test-election", leader.PostgresOptions{Identity: fmt.Sprintf("pg-%d", i), Check: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		electors = append(electors, el)
	}
	conn := pg.Conn(t)
	exercise(t, electors, func(t *testing.T, term leader.Term) {
		// Cut the leader's lock connection.
		var n int
		if err := conn.QueryRow(context.Background(),
			"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
			"dbinformer-leader "+term.Identity).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("terminated %d lock connections of %s, want 1", n, term.Identity)
		}
	})
}

func TestKube(t *testing.T) {
	k := harness.StartKube(t)
	client := k.Client(t)
	var electors []leader.Elector
	for i := range 3 {
		el, err := leader.NewKube(client, "default", "test-election", leader.KubeOptions{
			Identity:      fmt.Sprintf("kube-%d", i),
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		electors = append(electors, el)
	}
	exercise(t, electors, func(t *testing.T, term leader.Term) {
		// Another holder takes the Lease over (as an operator or a
		// partitioned peer would): the leader's renewals fail from then.
		ctx := context.Background()
		leases := client.CoordinationV1().Leases("default")
		for {
			l, err := leases.Get(ctx, "test-election", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != term.Identity {
				t.Fatalf("lease holder %v, want %s", l.Spec.HolderIdentity, term.Identity)
			}
			intruder := "intruder"
			now := metav1.NewMicroTime(time.Now())
			l.Spec.HolderIdentity = &intruder
			l.Spec.RenewTime = &now
			trans := int32(0)
			if l.Spec.LeaseTransitions != nil {
				trans = *l.Spec.LeaseTransitions
			}
			trans++
			l.Spec.LeaseTransitions = &trans
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
				return
			} else if !isConflict(err) {
				t.Fatal(err)
			}
		}
	})
}

func isConflict(err error) bool {
	var s interface{ Status() metav1.Status }
	return errors.As(err, &s) && s.Status().Code == 409
}
