package reliability

import (
	"fmt"
	"sync/atomic"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

// enqueuing records each notification and enqueues its key.
type enqueuing[T any] struct {
	rec   *informertest.Recorder[T]
	queue *workqueue.Queue[string]
}

func (e enqueuing[T]) OnAdd(key string, obj T, initial bool) {
	e.rec.OnAdd(key, obj, initial)
	e.queue.Add(key)
}

func (e enqueuing[T]) OnUpdate(key string, old, obj T) {
	e.rec.OnUpdate(key, old, obj)
	e.queue.Add(key)
}

func (e enqueuing[T]) OnDelete(key string, obj T, unknown bool) {
	e.rec.OnDelete(key, obj, unknown)
	e.queue.Add(key)
}

// panicking records each notification, then panics on about one in eight.
type panicking[T any] struct {
	rec     *informertest.Recorder[T]
	version func(T) int64
}

func (p panicking[T]) boom(key string, obj T) {
	if v := p.version(obj); (uint64(v)*0x9e3779b97f4a7c15+uint64(len(key)))%8 == 0 {
		panic(fmt.Sprintf("reliability: planned panic at %s version %d", key, v))
	}
}

func (p panicking[T]) OnAdd(key string, obj T, initial bool) {
	p.rec.OnAdd(key, obj, initial)
	p.boom(key, obj)
}

func (p panicking[T]) OnUpdate(key string, old, obj T) {
	p.rec.OnUpdate(key, old, obj)
	p.boom(key, obj)
}

func (p panicking[T]) OnDelete(key string, obj T, unknown bool) {
	p.rec.OnDelete(key, obj, unknown)
	p.boom(key, obj)
}

// prefixed prefixes what it reports.
type prefixed struct {
	*divergences
	prefix string
}

func (p *prefixed) Errorf(format string, args ...any) { p.add(p.prefix + fmt.Sprintf(format, args...)) }

// metrics counts what the faults made the informer do, so that the report
// shows they bit.
type metrics struct {
	core.NoopMetrics
	relists, restarts, panics atomic.Int64
}

func (m *metrics) HandlerPanicked(string) { m.panics.Add(1) }

func (m *metrics) InformerMetrics(string) core.InformerMetrics { return m }

func (m *metrics) Listed(relist bool, _ int, err error) {
	if relist && err == nil {
		m.relists.Add(1)
	}
}

func (m *metrics) WatchRestarted(reason error) {
	if reason != nil {
		m.restarts.Add(1)
	}
}
