package relay

import (
	"context"
	"sync"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// A partial Downstream's Watch (FilterShards), moved out of partial.go,
// which holds the proof that confirms what it holds.

// partialWatch turns the owned shards' messages into batches confirmed by
// the proof at the top of partial.go.
type partialWatch[T any] struct {
	ctx  context.Context
	d    *Downstream[T]
	v    *view
	emit func([]driver.Event[T]) error
	want chan<- struct{} // asks the event stream for a bookmark

	lastV, lastSeq uint64            // confirmed: version, and the position it was proven at
	held           []driver.Event[T] // read, not confirmed yet, in stream order
	out            []driver.Event[T]
	ahead          []aheadEvent[T]
}

// maxHeld bounds the changes a watch holds while its shards are not
// proven: past it, only each key's last change is kept.
const maxHeld = 1 << 16

func (w *partialWatch[T]) put(ev driver.Event[T]) {
	w.held = append(w.held, ev)
	if len(w.held) <= maxHeld {
		return
	}
	last := make(map[string]int, len(w.held))
	for i, ev := range w.held {
		last[ev.Key] = i
	}
	n := 0
	for i, ev := range w.held {
		if last[ev.Key] == i {
			w.held[n] = ev
			n++
		}
	}
	clear(w.held[n:])
	w.held = w.held[:n]
}

func (w *partialWatch[T]) take(batch []driver.Event[entry]) error {
	var bookmark uint64
	fresh := false
	for _, ev := range batch {
		if ev.Type == driver.Bookmark {
			bookmark = max(bookmark, uint64(ev.RV))
			continue
		}
		fresh = true
		if ev.Err != nil {
			w.put(driver.Event[T]{Type: driver.Modified, Key: ev.Key, Err: ev.Err})
			continue
		}
		if e := ev.Object; e.kind == kindKey {
			w.put(w.d.event(driver.Added, e, core.ResourceVersion(e.version)))
		}
	}
	w.out = w.out[:0]
	if bookmark > 0 {
		c, ok, err := w.d.confirm(w.ctx, w.v, bookmark)
		if err != nil {
			return err
		}
		if ok && c > w.lastV {
			// Every change at the first version after the last
			// confirmed: a message read may stand for earlier changes of
			// its key that it superseded before the consumer reached
			// them, at any version after that one, and the queue counts
			// a version as applied once no change at or before it is
			// pending (at its own version, a busy key's change let
			// WaitFor return before it was applied:
			// TestShardedDownstreamsUnderWrites).
			rv := core.ResourceVersion(w.lastV + 1)
			for _, ev := range w.held {
				if ev.RV > rv && w.d.audit.running() {
					w.ahead = append(w.ahead, aheadEvent[T]{v: uint64(ev.RV), ev: ev})
					w.ahead[len(w.ahead)-1].ev.RV = rv
				}
				ev.RV = rv
				w.out = append(w.out, ev)
			}
			clear(w.held)
			w.held = w.held[:0]
			w.out = append(w.out, driver.Event[T]{Type: driver.Bookmark, RV: core.ResourceVersion(c)})
			w.lastV, w.lastSeq = c, bookmark
		} else if ok {
			w.lastSeq = bookmark
		}
	}
	if fresh && len(w.held) > 0 {
		// Changes read and held: ask for the bookmark that can prove
		// them. (Not after a bookmark alone that proved nothing, as when
		// the relay stopped inside a group: the next message, the idle
		// check or the informer's next request asks again.)
		select {
		case w.want <- struct{}{}:
		default:
		}
	}
	if len(w.out) == 0 {
		if w.lastV == 0 {
			return nil
		}
		// Reading, not stuck: a bookmark at the last version confirmed.
		w.out = append(w.out, driver.Event[T]{Type: driver.Bookmark, RV: core.ResourceVersion(w.lastV)})
	}
	err := w.emit(w.out)
	clear(w.out)
	if err != nil {
		clear(w.ahead)
		w.ahead = w.ahead[:0]
		return err
	}
	w.d.audit.delivered(w.lastV, w.ahead)
	clear(w.ahead)
	w.ahead = w.ahead[:0]
	return nil
}

// watchPartial is Watch over the owned shards' subjects.
func (d *Downstream[T]) watchPartial(ctx context.Context, v *view, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	seq, err := d.seqFor(ctx, uint64(from))
	if err != nil {
		if ctx.Err() != nil {
			return driver.Stopped(ctx)
		}
		return err
	}
	d.audit.started(uint64(from))
	// The informer's progress requests and the watch's own go to the
	// event stream through one channel.
	want := make(chan struct{}, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var fwd sync.WaitGroup
	if opts.Progress != nil {
		fwd.Add(1)
		go func() {
			defer fwd.Done()
			for {
				select {
				case <-wctx.Done():
					return
				case <-opts.Progress:
					select {
					case want <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	w := &partialWatch[T]{ctx: wctx, d: d, v: v, emit: opts.Emit, want: want,
		lastV: uint64(from), lastSeq: seq}
	err = v.es.Watch(wctx, core.ResourceVersion(seq), driver.WatchOptions[entry]{Emit: w.take, Progress: want})
	cancel()
	fwd.Wait()
	d.park(w.lastV, w.lastSeq)
	if ctx.Err() != nil {
		return driver.Stopped(ctx)
	}
	return err
}
