package workqueue

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

// model is the reference the fuzz test holds Queue to: the rules from the
// package doc written out in the plainest way, with no concern for speed.
type model struct {
	now   time.Duration
	seq   int
	shut  bool
	items map[int]*modelItem
}

type modelItem struct {
	dirty, processing, waiting bool
	prio, pushSeq              int // position in the ready queue when dirty && !processing
	at                         time.Duration
	waitSeq, wprio             int
}

func (m *model) item(k int) *modelItem {
	it := m.items[k]
	if it == nil {
		it = &modelItem{}
		m.items[k] = it
	}
	return it
}

func (m *model) queued() []int {
	var ks []int
	for k, it := range m.items {
		if it.dirty && !it.processing {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b int) int {
		x, y := m.items[a], m.items[b]
		if x.prio != y.prio {
			return y.prio - x.prio
		}
		return x.pushSeq - y.pushSeq
	})
	return ks
}

func (m *model) push(it *modelItem) {
	m.seq++
	it.pushSeq = m.seq
}

func (m *model) add(k, prio int) {
	it := m.item(k)
	if it.dirty {
		if prio > it.prio {
			it.prio = prio
			if !it.processing {
				m.push(it)
			}
		}
		return
	}
	it.dirty, it.prio = true, prio
	if !it.processing {
		m.push(it)
	}
}

func (m *model) promote() {
	var due []int
	for k, it := range m.items {
		if it.waiting && it.at <= m.now {
			due = append(due, k)
		}
	}
	slices.SortFunc(due, func(a, b int) int {
		x, y := m.items[a], m.items[b]
		if x.at != y.at {
			return int(x.at - y.at)
		}
		return x.waitSeq - y.waitSeq
	})
	for _, k := range due {
		it := m.items[k]
		it.waiting = false
		m.add(k, it.wprio)
	}
}

func (m *model) addAfter(k int, d time.Duration, prio int) {
	if d <= 0 {
		m.add(k, prio)
		return
	}
	it := m.item(k)
	at := m.now + d
	if it.waiting {
		it.wprio = max(it.wprio, prio)
		if at >= it.at {
			return
		}
	} else {
		it.wprio = prio
	}
	m.seq++
	it.waiting, it.at, it.waitSeq = true, at, m.seq
}

// fuzzMaxOps bounds the operations one input drives. Four keys reach every
// state the queue has in far fewer steps, and the bound is what keeps the
// fuzzer fuzzing: Go minimizes each new interesting input, and its
// minimizer tries O(n²) candidates of O(n) steps each. Unbounded, a 400-byte
// input took 7 s and ~80k executions to minimize, during which a 10 s run
// reported 0 execs/s; past the bound, the tail is cut in a few tries.
const fuzzMaxOps = 64

// FuzzQueue drives a Queue and the model with the same operations, decoded
// from the input two bytes at a time (at most fuzzMaxOps of them), and
// compares Len, Get and shutdown after every step, and the queue's internal
// bookkeeping (checkInvariants). Four keys keep collisions (dedup, re-add
// while processing, priority raises, earlier delays) frequent. The queue
// sweeps idle key states as often as it can, so stale slots and delay
// entries meet freed and reused states; an input of odd length also makes
// every TryLock fail, so the operations take their fallback paths, which
// must behave the same.
func FuzzQueue(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 3, 0, 4, 1, 5, 1, 3, 0})
	f.Add([]byte{1, 0x31, 1, 0x12, 2, 2, 3, 0, 3, 0, 4, 0, 4, 1})
	f.Add([]byte{0, 0, 3, 0, 0, 0, 1, 0x20, 6, 0, 4, 0, 2, 3, 3, 0, 3, 0})
	f.Add([]byte{0, 0x10, 0, 0x21, 0, 0x32, 0, 0x03, 3, 0, 3, 0, 3, 0, 3, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		clk := clock.NewFake(epoch)
		q := New(Options[int]{Clock: clk})
		defer q.ShutDown()
		q.slack, q.sweepAt = 0, 0
		q.noTryLock = len(data)%2 == 1
		m := &model{items: map[int]*modelItem{}}
		taken := map[int]Taken[int]{} // each key's latest Take

		if len(data) > 2*fuzzMaxOps {
			data = data[:2*fuzzMaxOps]
		}
		for i := 0; i+1 < len(data); i += 2 {
			op, arg := data[i]%7, data[i+1]
			k := int(arg & 3)
			prio := int(arg>>2&3) - 1                  // -1..2
			d := time.Duration(arg>>4&3) * time.Second // 0..3 s
			if !m.shut {
				m.promote()
			}
			switch op {
			case 0: // Add
				if prio == 0 || arg&0x40 != 0 {
					q.Add(k)
					prio = 0
				} else {
					q.AddWithOpts(AddOpts{Priority: prio}, k)
				}
				if !m.shut {
					m.add(k, prio)
				}
			case 1: // AddAfter
				q.AddWithOpts(AddOpts{After: d, Priority: prio}, k)
				if !m.shut {
					m.addAfter(k, d, prio)
				}
			case 2: // time passes
				step := time.Duration(arg%8) * 500 * time.Millisecond
				clk.Step(step)
				m.now += step
				if !m.shut {
					m.promote()
				}
			case 3, 4: // Get, if it would not block
				want := m.queued()
				if len(want) == 0 && !m.shut {
					break
				}
				var got int
				var shut bool
				if op == 4 { // Take: Done through its handle below
					t, err := q.Take(context.Background())
					got, shut = t.Item, err != nil
					if !shut {
						taken[got] = t
					}
				} else {
					got, shut = q.Get()
				}
				if len(want) == 0 {
					if !shut {
						t.Fatalf("op %d: Get = %d, want shutdown", i/2, got)
					}
					break
				}
				if shut || got != want[0] {
					t.Fatalf("op %d: Get = %d, %v; model wants %d (queue %v)", i/2, got, shut, want[0], want)
				}
				it := m.items[got]
				it.dirty, it.processing = false, true
			case 5: // Done, on any key: not processing means a no-op
				if t, ok := taken[k]; ok && arg&0x80 != 0 {
					t.Done() // a handle whose item may be done, and its state reused
				} else {
					q.Done(k)
				}
				if it := m.items[k]; it != nil && it.processing {
					it.processing = false
					if it.dirty {
						m.push(it)
					}
				}
			case 6:
				if arg%4 != 0 {
					break // shut down rarely, so most inputs exercise a live queue
				}
				q.ShutDown()
				if !m.shut {
					m.promote()
					m.shut = true
					for _, it := range m.items {
						it.waiting = false
					}
				}
			}
			if got, want := q.Len(), len(m.queued()); got != want {
				t.Fatalf("op %d (%d,%#x): Len = %d, model %d", i/2, op, arg, got, want)
			}
			if q.ShuttingDown() != m.shut {
				t.Fatalf("op %d: ShuttingDown = %v", i/2, !m.shut)
			}
			if err := q.checkInvariants(); err != nil {
				t.Fatalf("op %d (%d,%#x): %v", i/2, op, arg, err)
			}
		}
	})
}
