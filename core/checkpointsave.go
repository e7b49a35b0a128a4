package core

import (
	"context"
	"errors"
	"io"
	"iter"
	"sync"
)

func (i *SharedIndexInformer[T]) saveCheckpoint(ctx context.Context, c *checkpointer[T]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !i.checkSynced() {
		return nil
	}
	// A relist's objects carry no version of their own: while one is
	// applied, the cache holds states whose versions nothing records.
	// The next interval saves.
	lists, listing := i.queue.(listStater).listState()
	if listing {
		return nil
	}
	// Everything up to rv is in the cache. The cache moves on while the
	// save reads it: an object read in a state after rv is written down
	// with its version (c.rec), and a warm start drops the older changes
	// the watch from rv replays onto it.
	rv := i.queue.AppliedVersion()
	if c.wrote && rv == c.saved {
		return nil
	}
	c.rec.forget(rv)
	err := c.opts.Store.Save(ctx, c.name, func(w io.Writer) error {
		return i.encodeCache(w, c, rv, lists)
	})
	if errors.Is(err, errKeyGone) {
		// A key went between the listing of the keys and the reading of
		// its object: save a copy taken at once.
		err = c.opts.Store.Save(ctx, c.name, func(w io.Writer) error {
			var keys []string
			var objs []T
			later := map[string]ResourceVersion{}
			i.indexer.snapshot(func(n int, all iter.Seq2[string, T]) {
				keys, objs = make([]string, 0, n), make([]T, 0, n)
				for k, o := range all {
					keys = append(keys, k)
					objs = append(objs, o)
				}
				c.rec.collectLater(rv, keys, later)
			})
			if now, listing := i.queue.(listStater).listState(); now != lists || listing {
				return errListed
			}
			return encodeCheckpoint(w, c.codec, c.name, rv, keys, objs, later)
		})
	}
	if errors.Is(err, errListed) {
		return nil
	}
	if err != nil {
		err = &CheckpointError{Name: c.name, Op: "save", Err: err}
		c.note(i.clk.Now(), false, err)
		return err
	}
	c.statMu.Lock()
	c.saved, c.wrote = rv, true
	c.statMu.Unlock()
	c.note(i.clk.Now(), true, nil)
	if c.ack != nil {
		c.ack.AcknowledgeDurable(rv)
	}
	return nil
}

// listStater is both queues' listState (queueBase).
type listStater interface {
	listState() (begun uint64, listing bool)
}

// errKeyGone: a key was deleted while a checkpoint was written.
var errKeyGone = errors.New("a key was deleted while the checkpoint was written")

// errListed: a relist began while a checkpoint was written (the save is
// dropped; the next interval's writes the list's result).
var errListed = errors.New("a list began while the checkpoint was written")

// encodeCache writes the cache as a checkpoint at rv, everything up to
// which it holds. It copies the keys (and their positions in the base),
// then reads the objects a chunk at a time, each chunk under the read
// lock, so that a save holds a few chunks of objects, not a second copy of
// the cache, and writers wait for one chunk at most. An object read in a
// state after rv is written down with that state's version, read under
// the same lock (c.rec). A key deleted meanwhile fails the write with
// errKeyGone: the count in the checkpoint's header is the keys'. A list
// begun since lists (the queue's count then) fails it with errListed.
func (i *SharedIndexInformer[T]) encodeCache(w io.Writer, c *checkpointer[T], rv ResourceVersion, lists uint64) error {
	keys, where, base := i.indexer.keysNow()
	var mu sync.Mutex
	later := map[string]ResourceVersion{}
	get := func(lo int, keys []string, dst []T) error {
		ok := i.indexer.getAll(keys, where[lo:lo+len(keys)], base, dst, func() {
			mu.Lock()
			defer mu.Unlock()
			c.rec.collectLater(rv, keys, later)
		})
		if !ok {
			return errKeyGone
		}
		return nil
	}
	return encodeCheckpointOf(w, c.codec, c.name, rv, keys, get, func() (map[string]ResourceVersion, error) {
		if now, listing := i.queue.(listStater).listState(); now != lists || listing {
			return nil, errListed
		}
		return later, nil
	})
}

// recordDelta records d's change for the checkpoints' saves; called under
// the cache's write lock before d is applied. A list's objects have no
// version (a save waits for a list to be applied).
func recordDelta[T any](rec *changeRecord, d *Delta[T]) {
	if rec == nil || !d.change() || d.RV == 0 {
		return
	}
	rec.touch(d.Key, d.RV)
}
