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
		func() queue[string] { return workqueue.New(workqueue.Config[string]{}) },
		func() queue[int] { return workqueue.New(workqueue.Config[int]{}) }},
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

// BenchmarkWorkQueue: one op is a whole workload, reported as items/s.
//   - AddGetDone: one goroutine adds the 10,000 keys, then Gets and Dones
//     them, 100 rounds (1,000,000 items).
//   - Parallel8x8: 8 producers add 1,000,000 keys drawn from 10,000 while 8
//     consumers Get and Done, then a drain; duplicates that dedup absorbs
//     are part of the workload, as in a controller.
//   - AddAfter100k: 100,000 AddAfter of new keys into a queue already
//     holding 100,000 delayed items, until all are in the delay heap.
func BenchmarkWorkQueue(b *testing.B) {
	keys := wqKeySet()
	rounds := size(100, 2)
	b.Run("AddGetDone", func(b *testing.B) {
		for _, qq := range queues {
			b.Run(qq.name, func(b *testing.B) {
				am := allocMeter{unit: "item"}
				for range b.N {
					q := qq.str()
					am.start()
					for range rounds {
						for _, k := range keys {
							q.Add(k)
						}
						for range keys {
							k, _ := q.Get()
							q.Done(k)
						}
					}
					am.stop(b, rounds*wqKeys)
					if q.Len() != 0 {
						b.Fatalf("%d left", q.Len())
					}
					q.ShutDown()
				}
			})
		}
	})
	adds := size(1_000_000, 20_000)
	b.Run("Parallel8x8", func(b *testing.B) {
		const producers, consumers = 8, 8
		for _, qq := range queues {
			b.Run(qq.name, func(b *testing.B) {
				am := allocMeter{unit: "item"}
				for range b.N {
					q := qq.str()
					am.start()
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
					per := adds / producers
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
					am.stop(b, per*producers)
					// client-go's ShutDownWithDrain leaves its delaying
					// queue's waitingLoop running; ShutDown stops it.
					q.ShutDown()
				}
			})
		}
	})
	pending := size(100_000, 5_000)
	b.Run("AddAfter100k", func(b *testing.B) {
		for _, qq := range queues {
			b.Run(qq.name, func(b *testing.B) {
				am := allocMeter{unit: "item"}
				for range b.N {
					b.StopTimer()
					q := qq.num()
					r := rand.New(rand.NewPCG(1, 2))
					delay := func() time.Duration { return time.Hour + time.Duration(r.IntN(3600))*time.Second }
					for k := range pending {
						q.AddAfter(k, delay())
					}
					// client-go hands AddAfter to a goroutine over a channel:
					// a due sentinel behind them comes out of Get only once
					// all before it reached the heap. Same on both sides.
					settle := func(sentinel int) {
						q.AddAfter(sentinel, time.Nanosecond)
						if k, _ := q.Get(); k != sentinel {
							b.Fatalf("got %d, want sentinel %d", k, sentinel)
						}
						q.Done(sentinel)
					}
					settle(-1)
					b.StartTimer()
					am.start()
					for i := range pending {
						q.AddAfter(pending+i, delay())
					}
					settle(-2)
					am.stop(b, pending)
					b.StopTimer()
					q.ShutDown()
				}
			})
		}
	})
}
