package core

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

type benchObj struct {
	Name, Org, Team string
	N               int
}

// sliceLW lists nothing and then plays pre-built batches.
type sliceLW struct{ batches [][]driver.Event[*benchObj] }

func (s *sliceLW) List(context.Context, driver.ListSink[*benchObj]) (ResourceVersion, error) {
	return 0, nil
}

func (s *sliceLW) Watch(ctx context.Context, from ResourceVersion, opts driver.WatchOptions[*benchObj]) error {
	for _, b := range s.batches {
		if b[0].RV > from {
			if err := opts.Emit(b); err != nil {
				return err
			}
		}
	}
	<-ctx.Done()
	return driver.Stopped(ctx)
}

// BenchmarkPipeline measures one change through watch → FIFO → Indexer with
// two indexes → one handler, per op. Half the changes update existing keys.
func BenchmarkPipeline(b *testing.B) {
	for _, mode := range []bool{false, true} {
		name := "FIFO"
		if mode {
			name = "DeltaFIFO"
		}
		b.Run(name, func(b *testing.B) {
			const batch = 100
			keys := b.N/2 + 1
			var batches [][]driver.Event[*benchObj]
			for i := 0; i < b.N; i += batch {
				n := min(batch, b.N-i)
				evs := make([]driver.Event[*benchObj], n)
				for j := range evs {
					k := (i + j) % keys
					typ := driver.Added
					if i+j >= keys {
						typ = driver.Modified
					}
					evs[j] = driver.Event[*benchObj]{Type: typ, Key: "k" + strconv.Itoa(k), Object: &benchObj{Name: "n", Org: "o" + strconv.Itoa(k%10), Team: "t" + strconv.Itoa(k%100), N: i + j}, HasObject: true, RV: ResourceVersion(i + j + 1)}
				}
				batches = append(batches, evs)
			}
			inf := NewSharedIndexInformer[*benchObj](&sliceLW{batches: batches}, InformerOptions[*benchObj]{
				DeltaFIFO: mode,
				Indexers: Indexers[*benchObj]{
					"org":  func(o *benchObj) ([]string, error) { return []string{o.Org}, nil },
					"team": func(o *benchObj) ([]string, error) { return []string{o.Team}, nil },
				},
			})
			var seen atomic.Int64
			done := make(chan struct{})
			target := int64(b.N)
			_, _ = inf.AddEventHandler(ResourceEventHandlerFuncs[*benchObj]{
				AddFunc: func(string, *benchObj, bool) {
					if seen.Add(1) == target {
						close(done)
					}
				},
				UpdateFunc: func(string, *benchObj, *benchObj) {
					if seen.Add(1) == target {
						close(done)
					}
				},
			})
			ctx, cancel := context.WithCancel(context.Background())
			b.ReportAllocs()
			b.ResetTimer()
			runDone := make(chan struct{})
			go func() { _ = inf.Run(ctx); close(runDone) }()
			if mode {
				// DeltaFIFO merges a key's pending changes into one run but
				// still delivers each; wait for the version instead.
				_ = inf.WaitFor(ctx, ResourceVersion(b.N))
			} else {
				<-done
			}
			b.StopTimer()
			cancel()
			<-runDone
		})
	}
}
