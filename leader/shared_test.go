package leader_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
)

// Two processes' worth of Shared elections, two members each, on one
// Postgres lock: the members of one lead together in the same term, and
// both move to a new term when its lock connection is cut. (Members of
// two processes may overlap for a moment, until the deposed one notices:
// that is what Term.Epoch fences.)
func TestShared(t *testing.T) {
	pg := harness.StartPostgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()

	var mu sync.Mutex
	leading := map[string]leader.Term{} // "process/member" -> term
	mixed := ""
	for p := range 2 {
		el, err := leader.NewPostgres(pg.ConnString(), "shared", leader.PostgresOptions{Identity: fmt.Sprintf("p%d", p)})
		if err != nil {
			t.Fatal(err)
		}
		sh := leader.Share(el)
		wg.Go(func() {
			if err := sh.Run(ctx); err != nil {
				t.Error(err)
			}
		})
		for m := range 2 {
			name := fmt.Sprintf("p%d/m%d", p, m)
			wg.Go(func() {
				err := sh.Member().Run(ctx, func(lctx context.Context, term leader.Term) error {
					mu.Lock()
					for other, ot := range leading {
						if ot.Identity == term.Identity && ot.Epoch != term.Epoch {
							mixed = fmt.Sprintf("%s leads in epoch %d beside %s in epoch %d", name, term.Epoch, other, ot.Epoch)
						}
					}
					leading[name] = term
					mu.Unlock()
					<-lctx.Done()
					if c := context.Cause(lctx); ctx.Err() == nil && !errors.Is(c, leader.ErrLost) {
						t.Errorf("%s: lead context ended with %v, want ErrLost", name, c)
					}
					mu.Lock()
					delete(leading, name)
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
	}
	both := func(after uint64) leader.Term {
		var term leader.Term
		informertest.Eventually(t, fmt.Sprintf("both members of one process, and only they, leading in an epoch above %d", after), func() bool {
			mu.Lock()
			defer mu.Unlock()
			if len(leading) != 2 {
				return false
			}
			var epochs []uint64
			for _, tm := range leading {
				term = tm
				epochs = append(epochs, tm.Epoch)
			}
			return epochs[0] == epochs[1] && term.Epoch > after
		})
		return term
	}
	first := both(0)
	var n int
	if err := pg.Conn(t).QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
		"dbinformer-leader "+first.Identity).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d lock connections of %s (%v), want 1", n, first.Identity, err)
	}
	second := both(first.Epoch)
	if second.Identity == first.Identity {
		// The same process may win again; either way both members moved
		// to the new term together.
		t.Logf("process %s led again", second.Identity)
	}
	mu.Lock()
	defer mu.Unlock()
	if mixed != "" {
		t.Error(mixed)
	}
}
