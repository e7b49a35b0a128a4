package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
)

// droppingSource stands for a source that removes an object without a
// change of its own (a NATS KV bucket's MaxAge): its watches never deliver
// key drop, and AuditUnchanged answers as the test sets. It embeds the
// memory source, whose AuditList is found through it.
type droppingSource struct {
	*memory.Source[versioned]
	drop      string
	unchanged bool
	err       error
	asked     []string
}

func (d *droppingSource) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[versioned]) error {
	emit := opts.Emit
	opts.Emit = func(batch []driver.Event[versioned]) error {
		out := make([]driver.Event[versioned], 0, len(batch))
		for _, ev := range batch {
			if ev.Key != d.drop {
				out = append(out, ev)
			}
		}
		if len(out) == 0 {
			out = append(out, driver.Event[versioned]{Type: driver.Bookmark, RV: batch[len(batch)-1].RV})
		}
		return emit(out)
	}
	return d.Source.Watch(ctx, from, opts)
}

func (d *droppingSource) AuditUnchanged(_ context.Context, key string, _ core.ResourceVersion) (bool, error) {
	d.asked = append(d.asked, key)
	return d.unchanged, d.err
}

// A key the audit's snapshot had and the cache reached the snapshot's
// version without is a loss only if the source still holds it: one that
// the source dropped without a version meanwhile is in flight, neither
// reported nor healed back; one it still holds is missing and healed; a
// recheck that fails fails the run.
func TestAuditRechecksBeforeReporting(t *testing.T) {
	for _, tc := range []struct {
		name      string
		unchanged bool
		err       error
		outcome   core.AuditOutcome
		cached    bool
	}{
		{"dropped by the source", false, nil, core.AuditEqual, false},
		{"still held by the source", true, nil, core.AuditDivergent, true},
		{"recheck failed", false, errors.New("no connection"), core.AuditFailed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &droppingSource{Source: memory.New[versioned](memory.Options{}), drop: "gone", unchanged: tc.unchanged, err: tc.err}
			src.Put("a", versioned{Key: "a", V: 1})
			inf, _ := informertest.Run[versioned](t, src, core.InformerOptions[versioned]{})
			last := src.Put("gone", versioned{Key: "gone", V: 2})
			ctx := context.Background()
			if err := inf.WaitFor(ctx, last); err != nil {
				t.Fatal(err)
			}
			r := inf.AuditNow(ctx)
			if r.Outcome != tc.outcome {
				t.Fatalf("outcome %s, want %s: %v", r.Outcome, tc.outcome, r)
			}
			if len(src.asked) != 1 || src.asked[0] != "gone" {
				t.Fatalf("rechecked %q, want [gone]", src.asked)
			}
			switch tc.outcome {
			case core.AuditEqual:
				if r.InFlight != 1 || r.Healed != 0 {
					t.Fatalf("in flight %d, healed %d; want 1, 0: %v", r.InFlight, r.Healed, r)
				}
			case core.AuditDivergent:
				if r.Missing != 1 || r.Healed != 1 || len(r.MissingKeys) != 1 || r.MissingKeys[0] != "gone" {
					t.Fatalf("want gone missing and healed: %v", r)
				}
			case core.AuditFailed:
				if !strings.Contains(r.Err.Error(), `recheck key "gone"`) || !errors.Is(r.Err, tc.err) {
					t.Fatalf("err %v, want the recheck's", r.Err)
				}
			}
			if _, ok := inf.Indexer().Get("gone"); ok != tc.cached {
				t.Fatalf("gone cached: %v, want %v", ok, tc.cached)
			}
		})
	}
}
