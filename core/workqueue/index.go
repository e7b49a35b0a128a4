package workqueue

// keyIndex maps keys to state indexes. It replaces a Go map for three
// reasons: the hash is computed by the caller before taking any lock (its
// top bits pick the shard, its low bits the slot), which shortens the
// critical sections; "find or insert" is one probe where a map needs a
// lookup and an assign; and a slot is 8 bytes, the low half of the hash
// and the state index, because the key itself lives in the state. The
// whole index of a queue of 10,000 keys fits in 128 KB, so a lookup costs
// the one cache miss on the state it needed anyway, where a slot holding
// the key costs a second. Open addressing with linear probing and
// backward-shift deletion, so deletes leave no tombstones behind.
type keyIndex[K comparable] struct {
	slots []indexSlot // power-of-two length (at most 1<<32), or nil
	n     int
}

type indexSlot struct {
	hash uint32 // the low half of the key's hash, which also picks the slot
	ref  int32  // state index + 1; 0 marks an empty slot
}

func (x *keyIndex[K]) len() int { return x.n }

// find returns k's state index, or -1.
func (x *keyIndex[K]) find(h uint64, k K, t *stateTable[K]) int32 {
	if x.n == 0 {
		return -1
	}
	mask := uint64(len(x.slots) - 1)
	tag := uint32(h)
	for i := h & mask; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s.ref == 0 {
			return -1
		}
		if s.hash == tag && t.at(s.ref-1).key == k {
			return s.ref - 1
		}
	}
}

// findOrInsert returns k's slot. For a new key the slot is claimed with
// ref 0 and found is false: the caller sets ref, and the state's key,
// before the next call.
func (x *keyIndex[K]) findOrInsert(h uint64, k K, t *stateTable[K]) (s *indexSlot, found bool) {
	if (x.n+1)*4 > len(x.slots)*3 {
		x.grow()
	}
	mask := uint64(len(x.slots) - 1)
	tag := uint32(h)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.ref == 0 {
			*s = indexSlot{hash: tag}
			x.n++
			return s, false
		}
		if s.hash == tag && t.at(s.ref-1).key == k {
			return s, true
		}
	}
}

func (x *keyIndex[K]) delete(h uint64, k K, t *stateTable[K]) {
	if x.n == 0 {
		return
	}
	mask := uint64(len(x.slots) - 1)
	tag := uint32(h)
	i := h & mask
	for ; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s.ref == 0 {
			return
		}
		if s.hash == tag && t.at(s.ref-1).key == k {
			break
		}
	}
	// Shift later members of the probe run back into the hole, so every
	// key stays reachable from its home slot without tombstones.
	for j := (i + 1) & mask; x.slots[j].ref != 0; j = (j + 1) & mask {
		home := uint64(x.slots[j].hash) & mask
		// j's entry may move to i unless its home lies cyclically in (i, j].
		if (j-home)&mask >= (j-i)&mask {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = indexSlot{}
	x.n--
}

func (x *keyIndex[K]) grow() {
	size := 2 * len(x.slots)
	if size == 0 {
		size = 16
	}
	old := x.slots
	x.slots = make([]indexSlot, size)
	mask := uint64(size - 1)
	for _, s := range old {
		if s.ref == 0 {
			continue
		}
		i := uint64(s.hash) & mask
		for x.slots[i].ref != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = s
	}
}

func (x *keyIndex[K]) reset() {
	x.slots = nil
	x.n = 0
}
