package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/memory"
)

// TestAgainstModel drives a Source with random writes, transactions,
// advances and compactions, and compares List and Watch from every
// watchable version with a plain model: the list of every event and the
// map it folds to.
func TestAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			s := memory.New[obj](memory.Options{MaxBatch: 1 + rng.IntN(5)})
			var events []driver.Event[obj] // the model's history
			state := map[string]int{}
			var head, compacted core.ResourceVersion
			key := func() string { return fmt.Sprintf("k%d", rng.IntN(6)) }
			for step := range 150 {
				switch r := rng.IntN(10); {
				case r < 5:
					k := key()
					typ := driver.Added
					if _, ok := state[k]; ok {
						typ = driver.Modified
					}
					head++
					if got := s.Put(k, obj{step}); got != head {
						t.Fatalf("Put returned %d, want %d", got, head)
					}
					state[k] = step
					events = append(events, driver.Event[obj]{Type: typ, Key: k, Object: obj{step}, HasObject: true, RV: head})
				case r < 7:
					k := key()
					last, ok := state[k]
					rv, deleted := s.Delete(k)
					if deleted != ok {
						t.Fatalf("Delete(%s) reported %t, model says %t", k, deleted, ok)
					}
					if ok {
						head++
						delete(state, k)
						events = append(events, driver.Event[obj]{Type: driver.Deleted, Key: k, Object: obj{last}, HasObject: true, RV: head})
					}
					if rv != head {
						t.Fatalf("Delete returned %d, want %d", rv, head)
					}
				case r < 8:
					var ops []memory.Op[obj]
					var evs []driver.Event[obj]
					for _, k := range []string{"t1", "t2", key()} {
						if slices.ContainsFunc(ops, func(o memory.Op[obj]) bool { return o.Key == k }) {
							continue
						}
						if last, ok := state[k]; ok && rng.IntN(2) == 0 {
							ops = append(ops, memory.DeleteOp[obj](k))
							evs = append(evs, driver.Event[obj]{Type: driver.Deleted, Key: k, Object: obj{last}, HasObject: true})
							continue
						}
						typ := driver.Added
						if _, ok := state[k]; ok {
							typ = driver.Modified
						}
						ops = append(ops, memory.PutOp(k, obj{step}))
						evs = append(evs, driver.Event[obj]{Type: typ, Key: k, Object: obj{step}, HasObject: true})
					}
					head++
					for i, ev := range evs {
						evs[i].RV = head
						if ev.Type == driver.Deleted {
							delete(state, ev.Key)
						} else {
							state[ev.Key] = step
						}
					}
					events = append(events, evs...)
					if rv, err := s.Apply(ops...); err != nil || rv != head {
						t.Fatalf("Apply = %d, %v; want %d", rv, err, head)
					}
				case r < 9:
					head++
					if got := s.Advance(); got != head {
						t.Fatalf("Advance returned %d, want %d", got, head)
					}
				default:
					c := compacted + core.ResourceVersion(rng.IntN(int(head-compacted)+1))
					if err := s.Compact(c); err != nil {
						t.Fatal(err)
					}
					compacted = c
				}
			}

			items := map[string]int{}
			rv, err := s.List(context.Background(), driver.ListSink[obj]{Emit: func(ev driver.Event[obj]) error {
				items[ev.Key] = ev.Object.N
				return nil
			}})
			if err != nil || rv != head {
				t.Fatalf("List = %d, %v; want head %d", rv, err, head)
			}
			if fmt.Sprint(items) != fmt.Sprint(state) {
				t.Errorf("List %v, model %v", items, state)
			}
			for from := compacted; from <= head; from++ {
				i, _ := slices.BinarySearchFunc(events, from+1, func(ev driver.Event[obj], rv core.ResourceVersion) int { return int(ev.RV) - int(rv) })
				want := events[i:]
				if got := drain(t, s, from, len(want)); fmtBatch(got) != fmtBatch(want) {
					t.Errorf("Watch(%d):\n got %s\nwant %s", from, fmtBatch(got), fmtBatch(want))
				}
			}
			if compacted > 0 {
				if err := watchErr(s, compacted-1); !errors.Is(err, driver.ErrExpired) {
					t.Errorf("Watch(%d) below the compaction at %d succeeded", compacted-1, compacted)
				}
			}
		})
	}
}

// drain reads n events from a watch from `from`, then checks that nothing
// else is pending, and that no batch split a version.
func drain(t *testing.T, s *memory.Source[obj], from core.ResourceVersion, n int) []driver.Event[obj] {
	t.Helper()
	w := watch(t, s, from)
	var got []driver.Event[obj]
	for len(got) < n {
		b := next(t, w)
		if len(got) > 0 && b[0].RV == got[len(got)-1].RV {
			t.Errorf("Watch(%d): version %d split across batches", from, b[0].RV)
		}
		got = append(got, b...)
	}
	if err := quiet(t, s, w); err != nil {
		t.Errorf("Watch(%d): %v", from, err)
	}
	w.Stop()
	return got
}
