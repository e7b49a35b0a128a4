package workqueue

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The shapes here are the ones the benchmark issue compares with client-go's
// typed workqueue: 10,000 string keys, one goroutine or 8 producers with 8
// consumers, and AddAfter into a queue already holding 100,000 delayed items.

const benchKeys = 10_000

func benchKeySet() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "namespace/object-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkAddGetDone: one goroutine adds the 10,000 keys then takes and
// finishes them all; one op is one key through Add, Get and Done.
func BenchmarkAddGetDone(b *testing.B) {
	keys := benchKeySet()
	q := New(Options[string]{})
	defer q.ShutDown()
	b.ReportAllocs()
	for i := 0; i < b.N; i += benchKeys {
		n := min(benchKeys, b.N-i)
		for _, k := range keys[:n] {
			q.Add(k)
		}
		for range n {
			k, _ := q.Get()
			q.Done(k)
		}
	}
}

// BenchmarkAddGetDoneParallel: 8 producers add b.N keys drawn from 10,000
// while 8 consumers Get and Done; one op is one Add. The duplicates that
// dedup absorbs are part of the workload, as in a controller.
func BenchmarkAddGetDoneParallel(b *testing.B) {
	const producers, consumers = 8, 8
	keys := benchKeySet()
	q := New(Options[string]{})
	b.ReportAllocs()
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
	per := b.N / producers
	for p := range producers {
		prod.Go(func() {
			for i := range per {
				q.Add(keys[(p*7919+i)%benchKeys])
			}
		})
	}
	prod.Wait()
	q.ShutDownWithDrain()
	cons.Wait()
}

// BenchmarkAddAfterPending: AddAfter of new keys into a queue already
// holding 100,000 delayed items; one op is one AddAfter.
func BenchmarkAddAfterPending(b *testing.B) {
	const pending = 100_000
	// The wall clock: delays of an hour or more never fire during the run,
	// and a fake clock's mutex would be measured instead of the queue.
	q := New(Options[int]{})
	defer q.ShutDown()
	r := rand.New(rand.NewPCG(1, 2))
	for k := range pending {
		q.AddAfter(k, time.Hour+time.Duration(r.IntN(3600))*time.Second)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		q.AddAfter(pending+i, time.Hour+time.Duration(r.IntN(3600))*time.Second)
	}
	b.StopTimer()
}

// BenchmarkAddAfterZero: AddAfter with no delay must cost about an Add.
func BenchmarkAddAfterZero(b *testing.B) {
	keys := benchKeySet()
	q := New(Options[string]{})
	defer q.ShutDown()
	b.ReportAllocs()
	for i := 0; i < b.N; i += benchKeys {
		n := min(benchKeys, b.N-i)
		for _, k := range keys[:n] {
			q.AddAfter(k, 0)
		}
		for range n {
			k, _ := q.Get()
			q.Done(k)
		}
	}
}
