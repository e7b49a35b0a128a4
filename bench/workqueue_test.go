package bench_test

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	cgworkqueue "k8s.io/client-go/util/workqueue"

	"github.com/dbinformer/dbinformer/core/workqueue"
)

// queue is what the workloads need of either queue. Both sides are the
// queue a controller uses: ours (rate limiting and delays built in) and
// client-go's typed rate-limiting queue with its default controller limiter.
type queue[K comparable] interface {
	Add(K)
	AddAfter(K, time.Duration)
	Get() (K, bool)
	Done(K)
	Len() int
	ShutDown()
	ShutDownWithDrain()
}

var queues = []struct {
	name string
	str  func() queue[string]
	num  func() queue[int]
}{
	{"ours",
		func() queue[string] { return workqueue.New(workqueue.Options[string]{}) },
		func() queue[int] { return workqueue.New(workqueue.Options[int]{}) }},
	{"clientgo",
		func() queue[string] {
			return cgworkqueue.NewTypedRateLimitingQueue(cgworkqueue.DefaultTypedControllerRateLimiter[string]())
		},
		func() queue[int] {
			return cgworkqueue.NewTypedRateLimitingQueue(cgworkqueue.DefaultTypedControllerRateLimiter[int]())
		}},
}

const wqKeys = 10_000

func wqKeySet() []string {
	keys := make([]string, wqKeys)
	for i := range keys {
		keys[i] = "namespace/object-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkWorkQueue: one run is a whole workload, reported as items/s;
// the two queues alternate for 11 rounds (fewer left the medians at the
// mercy of a burst of load on the shared machine) and each reports its
// medians.
//   - AddGetDone: one goroutine adds the 10,000 keys, then Gets and Dones
//     them, 100 rounds (1,000,000 items).
//   - Parallel8x8: 8 producers add 1,000,000 keys drawn from 10,000 while 8
//     consumers Get and Done, then a drain; duplicates that dedup absorbs
//     are part of the workload, as in a controller.
//   - AddAfter100k: 100,000 AddAfter of new keys into a queue already
//     holding 100,000 delayed items, until all are in the delay heap.
func BenchmarkWorkQueue(b *testing.B) {
	keys := wqKeySet()
	rounds := size(11, 1)
	sides := func(mk func(name string, str func() queue[string], num func() queue[int]) side) []side {
		var out []side
		for _, qq := range queues {
			out = append(out, mk(qq.name, qq.str, qq.num))
		}
		return out
	}

	loops := size(100, 2)
	b.Run("AddGetDone", func(b *testing.B) {
		alternate(b, rounds, sides(func(name string, str func() queue[string], _ func() queue[int]) side {
			var q queue[string]
			return side{name: name, n: loops * wqKeys, unit: "item",
				prepare: func() { q = str() },
				run: func() {
					for range loops {
						for _, k := range keys {
							q.Add(k)
						}
						for range keys {
							k, _ := q.Get()
							q.Done(k)
						}
					}
				},
				finish: func() {
					if q.Len() != 0 {
						b.Fatalf("%s: %d left", name, q.Len())
					}
					q.ShutDown()
				}}
		})...)
	})

	const producers, consumers = 8, 8
	per := size(1_000_000, 20_000) / producers
	b.Run("Parallel8x8", func(b *testing.B) {
		alternate(b, rounds, sides(func(name string, str func() queue[string], _ func() queue[int]) side {
			var q queue[string]
			return side{name: name, n: per * producers, unit: "item",
				prepare: func() { q = str() },
				run: func() {
					var cons sync.WaitGroup
					for range consumers {
						cons.Go(func() {
							for {
								k, shutdown := q.Get()
								if shutdown {
									return
								}
								q.Done(k)
							}
						})
					}
					var prod sync.WaitGroup
					for p := range producers {
						prod.Go(func() {
							for i := range per {
								q.Add(keys[(p*7919+i)%wqKeys])
							}
						})
					}
					prod.Wait()
					q.ShutDownWithDrain()
					cons.Wait()
				},
				// client-go's ShutDownWithDrain leaves its delaying queue's
				// waitingLoop running; ShutDown stops it.
				finish: func() { q.ShutDown() }}
		})...)
	})

	pending := size(100_000, 5_000)
	b.Run("AddAfter100k", func(b *testing.B) {
		alternate(b, rounds, sides(func(name string, _ func() queue[string], num func() queue[int]) side {
			var q queue[int]
			var r *rand.Rand
			delay := func() time.Duration { return time.Hour + time.Duration(r.IntN(3600))*time.Second }
			// client-go hands AddAfter to a goroutine over a channel: a due
			// sentinel behind them comes out of Get only once all before
			// it reached the heap. Same on both sides.
			settle := func(sentinel int) {
				q.AddAfter(sentinel, time.Nanosecond)
				if k, _ := q.Get(); k != sentinel {
					b.Fatalf("%s: got %d, want sentinel %d", name, k, sentinel)
				}
				q.Done(sentinel)
			}
			return side{name: name, n: pending, unit: "item",
				prepare: func() {
					q, r = num(), rand.New(rand.NewPCG(1, 2))
					for k := range pending {
						q.AddAfter(k, delay())
					}
					settle(-1)
				},
				run: func() {
					for i := range pending {
						q.AddAfter(pending+i, delay())
					}
					settle(-2)
				},
				finish: func() { q.ShutDown() }}
		})...)
	})
}
