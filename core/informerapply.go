package core

import (
	"context"
	"fmt"
)

type noteKind uint8

const (
	noteAdd noteKind = iota + 1
	noteUpdate
	noteDelete
	// noteReplay is the initial adds of a lazily loaded checkpoint page,
	// one notification for all its objects, decoded as they were loaded
	// when delivered (see loadCheckpoint).
	noteReplay
)

// notification is stored by value in each handler's buffer: no boxing,
// no allocation per change.
type notification[T any] struct {
	kind noteKind
	// flag is isInInitialList for adds and finalStateUnknown for deletes.
	flag bool
	// sync marks a replay only handlers due for a resync receive.
	sync     bool
	key      string
	old, obj T
	page     *lazyObjects[T] // noteReplay: the page's records as loaded
}

// weight is how many of a handler's notifications n stands for.
func (n *notification[T]) weight() int {
	if n.kind == noteReplay {
		return len(n.page.recs)
	}
	return 1
}

// initial reports whether n holds initial adds (isInInitialList).
func (n *notification[T]) initial() bool {
	return n.flag && (n.kind == noteAdd || n.kind == noteReplay)
}

// handleDeltas applies one popped run to the cache in one update and hands
// the notifications to every handler.
func (i *SharedIndexInformer[T]) handleDeltas(deltas []Delta[T], initial bool) error {
	i.handleMu.RLock()
	defer i.handleMu.RUnlock()
	if ws := i.warm.Load(); ws != nil && !i.synced.Load() {
		ws.changes.Add(int64(len(deltas)))
	}
	notes := i.notes[:0]
	// Without handlers (listeners change only under handleMu) nothing
	// reads the notifications: building them cost a tenth of an initial
	// sync's CPU (a notification holds two objects).
	listening := len(i.listeners) > 0
	// Errors are reported after the update: an error handler that reads
	// the cache must not deadlock.
	var errs []error
	tr, rec, replay := i.auditTr.Load(), i.ckptRec.Load(), i.replay.Load()
	i.indexer.update(func(tx indexTx[T]) {
		for k := range deltas {
			d := &deltas[k]
			if replay.stale(d.Key, d.RV, d.change()) {
				continue
			}
			touchDelta(tr, d)
			recordDelta(rec, d)
			switch d.Type {
			case DeltaSync:
				if !listening {
					continue
				}
				// Sync deltas carry only the key: the cache is the state.
				obj, ok := tx.get(d.Key)
				if !ok {
					continue
				}
				notes = append(notes, notification[T]{kind: noteUpdate, sync: true, key: d.Key, old: obj, obj: obj})
			case DeltaAdded, DeltaUpdated, DeltaReplaced:
				if d.Fill != nil {
					obj, err := fillDelta(tx, d)
					if err != nil {
						// The key's cached state is older than the
						// source's and cannot be completed: it leaves the
						// cache, as an undecodable change does.
						errs = append(errs, i.deltaError(d, err))
						d.Type, d.HasObject, d.Undecodable, d.Fill = DeltaDeleted, false, true, nil
						notes = i.deleteDelta(tx, d, notes, listening, &errs)
						continue
					}
					d.Object, d.Fill = obj, nil
				}
				if initial && d.Type == DeltaReplaced && tx.stage(d.Key, d.Object) {
					// The first list into an empty cache: staged, filed
					// before the informer reports the sync (checkSynced).
					if listening {
						notes = append(notes, notification[T]{kind: noteAdd, flag: true, key: d.Key, obj: d.Object})
					}
					continue
				}
				old, existed, err := tx.put(d.Key, d.Object)
				if err != nil {
					errs = append(errs, i.deltaError(d, err))
					continue
				}
				if !listening {
					continue
				}
				if !existed {
					notes = append(notes, notification[T]{kind: noteAdd, flag: initial, key: d.Key, obj: d.Object})
					continue
				}
				sync := false
				if d.Type == DeltaReplaced && i.opts.Equal != nil {
					var err error
					if sync, err = i.equal(old, d.Object); err != nil {
						errs = append(errs, i.deltaError(d, err))
					}
				}
				notes = append(notes, notification[T]{kind: noteUpdate, sync: sync, key: d.Key, old: old, obj: d.Object})
			case DeltaDeleted:
				notes = i.deleteDelta(tx, d, notes, listening, &errs)
			}
		}
	})
	for _, err := range errs {
		i.rep.report(context.Background(), err)
	}
	if len(notes) > 0 {
		for _, l := range i.listeners {
			l.add(notes)
		}
	}
	clear(notes)
	i.notes = notes[:0]
	return nil
}

func (i *SharedIndexInformer[T]) deltaError(d *Delta[T], err error) error {
	if d.RV == 0 {
		return fmt.Errorf("%s: list: %w", i.name, err)
	}
	return fmt.Errorf("%s: version %d: %w", i.name, d.RV, err)
}

// equal runs Options.Equal; a panic counts as "not equal" and is reported.
func (i *SharedIndexInformer[T]) equal(a, b T) (eq bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			eq, err = false, fmt.Errorf("Equal panicked: %v", p)
		}
	}()
	return i.opts.Equal(a, b), nil
}
