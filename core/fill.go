package core

import "fmt"

// Applying a delta that needs the cached object: a delete, and a change
// whose watch left values out for the cache to fill in (Event.Fill).

// deleteDelta applies a DeltaDeleted and appends its notification.
func (i *SharedIndexInformer[T]) deleteDelta(tx indexTx[T], d *Delta[T], notes []notification[T], listening bool, errs *[]error) []notification[T] {
	old, existed, err := tx.delete(d.Key)
	if err != nil {
		*errs = append(*errs, i.deltaError(d, err))
	}
	if !existed || !listening {
		// No handler ever saw this key (client-go drops such deletes
		// too): there is nothing to undo.
		return notes
	}
	obj := old
	if d.HasObject {
		obj = d.Object
	}
	return append(notes, notification[T]{kind: noteDelete, flag: d.FinalStateUnknown || d.Undecodable, key: d.Key, obj: obj})
}

// fillDelta completes a delta whose watch left values out (Delta.Fill)
// from the object cached for its key: the key's previous state, since
// deltas are applied in order.
func fillDelta[T any](tx indexTx[T], d *Delta[T]) (obj T, err error) {
	// Owned: the filled object keeps some of the cached one's values, and
	// must not keep a checkpoint block alive through them.
	cached, ok := tx.getOwned(d.Key)
	if !ok {
		return obj, fmt.Errorf("key %q: the change left unchanged values out for the cache to fill in, but the cache holds no object for the key", d.Key)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("key %q: filling in the change's unchanged values panicked: %v", d.Key, p)
		}
	}()
	if obj, err = d.Fill(cached); err != nil {
		return obj, fmt.Errorf("key %q: %w", d.Key, err)
	}
	return obj, nil
}
