package workqueue

// keyIndex maps keys to state indexes. It replaces a Go map for two
// reasons: the hash is computed by the caller before taking any lock (its
// top bits pick the shard, its low bits the slot), which shortens the
// critical sections; and "find or insert" is one probe where a map needs a
// lookup and an assign. Open addressing with linear probing and
// backward-shift deletion, so deletes leave no tombstones behind.
type keyIndex[K comparable] struct {
	slots []indexSlot[K] // power-of-two length, or nil when empty
	n     int
}

type indexSlot[K comparable] struct {
	hash uint64
	ref  int32 // state index + 1; 0 marks an empty slot
	key  K
}

func (x *keyIndex[K]) len() int { return x.n }

// find returns k's state index, or -1.
func (x *keyIndex[K]) find(h uint64, k K) int32 {
	if x.n == 0 {
		return -1
	}
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.ref == 0 {
			return -1
		}
		if s.hash == h && s.key == k {
			return s.ref - 1
		}
	}
}

// findOrInsert returns k's slot. For a new key the slot is claimed with
// ref 0 and found is false: the caller sets ref before the next call.
func (x *keyIndex[K]) findOrInsert(h uint64, k K) (s *indexSlot[K], found bool) {
	if (x.n+1)*4 > len(x.slots)*3 {
		x.grow()
	}
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.ref == 0 {
			*s = indexSlot[K]{hash: h, key: k}
			x.n++
			return s, false
		}
		if s.hash == h && s.key == k {
			return s, true
		}
	}
}

func (x *keyIndex[K]) delete(h uint64, k K) {
	if x.n == 0 {
		return
	}
	mask := uint64(len(x.slots) - 1)
	i := h & mask
	for ; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.ref == 0 {
			return
		}
		if s.hash == h && s.key == k {
			break
		}
	}
	// Shift later members of the probe run back into the hole, so every
	// key stays reachable from its home slot without tombstones.
	for j := (i + 1) & mask; x.slots[j].ref != 0; j = (j + 1) & mask {
		home := x.slots[j].hash & mask
		// j's entry may move to i unless its home lies cyclically in (i, j].
		if (j-home)&mask >= (j-i)&mask {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = indexSlot[K]{}
	x.n--
}

func (x *keyIndex[K]) grow() {
	size := 2 * len(x.slots)
	if size == 0 {
		size = 16
	}
	old := x.slots
	x.slots = make([]indexSlot[K], size)
	mask := uint64(size - 1)
	for _, s := range old {
		if s.ref == 0 {
			continue
		}
		i := s.hash & mask
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
