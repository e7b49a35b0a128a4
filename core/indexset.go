package core

import (
	"hash/maphash"
	"math"
	"strings"
	"unsafe"
)

// The indexes' representation. Measured by bench's BenchmarkMemoryPerObject
// (1,000,000 objects, two indexes of 100 and 1,000 values): a
// map[value]map[key]struct{} costs 44–55 B per (value, key) pair (a
// swiss-table slot of a 16-byte string header plus control byte, at most
// 7/8 full and down to 7/16 after a doubling) and 344 B when every value
// has one key. Here instead:
//
//   - every key that has at least one index value gets a dense uint32 id in
//     a keyTable shared by all indexes of the Indexer: a pointer to its
//     bytes (the ones the items map holds) and its length, its hash and a
//     reference count, 18 B per key whatever the number of indexes;
//   - an index maps a value to a valueSet: the id inline when the value has
//     one key, else an idSet, an open-addressing table of uint32 ids
//     (linear probing, grown 1.45× at load 0.8, so between loads 0.55 and
//     0.8: ≈6 B per pair).
//
// Slots are placed by a hash of the key string, so a key's id is found by
// probing any set that holds it: no key → id map is needed. The reference
// count frees an id only when no set holds it any more, so an object
// mutated in place behind the cache (whose old index values can no longer
// be recomputed) leaves at worst a stale entry naming the right key, as
// with client-go, never a reused id.

var keySeed = maphash.MakeSeed()

func keyHash(key string) uint32 { return uint32(maphash.String(keySeed, key) >> 32) }

const keyPageBits = 10

// keyPage holds 1<<keyPageBits ids' keys, 18 B each: a key as a pointer to
// its bytes and a 32-bit length (a string header is 16 B; the 4 B saved
// per key are a tenth of what two indexes cost), its hash, and a 16-bit
// reference count (a count past maxPageRefs lives in keyTable.manyRefs: an
// id referenced 65,535 times is one key with that many index values).
type keyPage struct {
	data   [1 << keyPageBits]unsafe.Pointer
	lens   [1 << keyPageBits]uint32
	hashes [1 << keyPageBits]uint32
	refs   [1 << keyPageBits]uint16
}

const maxPageRefs = math.MaxUint16

// keyTable hands out dense ids for keys; pages never move, so growing it
// copies nothing but the page directory.
type keyTable struct {
	pages    []*keyPage
	free     []uint32
	next     uint32
	manyRefs map[uint32]uint32 // counts of ids whose page count is maxPageRefs
}

func (t *keyTable) key(id uint32) string {
	p, i := t.pages[id>>keyPageBits], id&(1<<keyPageBits-1)
	return unsafe.String((*byte)(p.data[i]), p.lens[i])
}

// hash is keyHash of the key, kept so that rehashing a set reads one word
// per id instead of hashing its key again.
func (t *keyTable) hash(id uint32) uint32 {
	return t.pages[id>>keyPageBits].hashes[id&(1<<keyPageBits-1)]
}

// refs is the number of index entries that hold id.
func (t *keyTable) refs(id uint32) uint32 {
	if n := t.pages[id>>keyPageBits].refs[id&(1<<keyPageBits-1)]; n < maxPageRefs {
		return uint32(n)
	}
	return t.manyRefs[id]
}

// ref counts one more index entry holding id.
func (t *keyTable) ref(id uint32) {
	r := &t.pages[id>>keyPageBits].refs[id&(1<<keyPageBits-1)]
	switch {
	case *r < maxPageRefs-1:
		*r++
	case *r == maxPageRefs-1:
		*r = maxPageRefs
		if t.manyRefs == nil {
			t.manyRefs = make(map[uint32]uint32)
		}
		t.manyRefs[id] = maxPageRefs
	default:
		t.manyRefs[id]++
	}
}

// unref counts one index entry fewer holding id.
func (t *keyTable) unref(id uint32) {
	r := &t.pages[id>>keyPageBits].refs[id&(1<<keyPageBits-1)]
	if *r < maxPageRefs {
		*r--
		return
	}
	if n := t.manyRefs[id] - 1; n >= maxPageRefs {
		t.manyRefs[id] = n
		return
	}
	delete(t.manyRefs, id)
	*r = maxPageRefs - 1
}

// alloc returns a fresh id with no references for key, whose keyHash is h.
func (t *keyTable) alloc(key string, h uint32) uint32 {
	if uint64(len(key)) > math.MaxUint32 {
		panic("dbinformer: an indexed key of 4 GiB or more")
	}
	var id uint32
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if t.next == math.MaxUint32-1 {
			panic("dbinformer: more than 2^32-2 indexed keys")
		}
		id = t.next
		t.next++
		if int(id>>keyPageBits) == len(t.pages) {
			t.pages = append(t.pages, new(keyPage))
		}
	}
	p, i := t.pages[id>>keyPageBits], id&(1<<keyPageBits-1)
	p.data[i] = unsafe.Pointer(unsafe.StringData(key))
	p.lens[i] = uint32(len(key))
	p.hashes[i] = h
	return id
}

// release frees id if nothing references it.
func (t *keyTable) release(id uint32) {
	if t.refs(id) != 0 {
		return
	}
	p, i := t.pages[id>>keyPageBits], id&(1<<keyPageBits-1)
	p.data[i], p.lens[i] = nil, 0
	t.free = append(t.free, id)
}

// ids returns key → id for every live id.
func (t *keyTable) ids() map[string]uint32 {
	out := make(map[string]uint32, int(t.next)-len(t.free))
	for id := range t.next {
		if t.refs(id) > 0 {
			out[t.key(id)] = id
		}
	}
	return out
}

const (
	emptySlot uint32 = 0
	tombSlot  uint32 = math.MaxUint32
)

// idSet is a set of ids (stored as id+1; 0 is an empty slot, MaxUint32 a
// deleted one) placed by the hash of their key.
type idSet struct {
	slots    []uint32
	n, tombs int32
}

func (s *idSet) home(h uint32) int { return int(uint64(h) * uint64(len(s.slots)) >> 32) }

func (s *idSet) next(i int) int {
	if i++; i == len(s.slots) {
		return 0
	}
	return i
}

// lookup finds the id of key.
func (s *idSet) lookup(h uint32, key string, kt *keyTable) (uint32, bool) {
	for i := s.home(h); ; i = s.next(i) {
		switch v := s.slots[i]; v {
		case emptySlot:
			return 0, false
		case tombSlot:
		default:
			if kt.key(v-1) == key {
				return v - 1, true
			}
		}
	}
}

// pos returns the slot of id, or -1.
func (s *idSet) pos(h, id uint32) int {
	for i := s.home(h); ; i = s.next(i) {
		switch s.slots[i] {
		case emptySlot:
			return -1
		case id + 1:
			return i
		}
	}
}

// insert adds id (whose key hashes to h) unless present: one probe run
// both looks for it and finds the first free slot.
func (s *idSet) insert(h, id uint32, kt *keyTable) bool {
	if int(s.n+s.tombs+1)*5 > len(s.slots)*4 {
		s.rehash(int(s.n)+1, kt)
	}
	free := -1
	for i := s.home(h); ; i = s.next(i) {
		switch s.slots[i] {
		case id + 1:
			return false
		case tombSlot:
			if free < 0 {
				free = i
			}
		case emptySlot:
			if free < 0 {
				free = i
			} else {
				s.tombs--
			}
			s.slots[free] = id + 1
			s.n++
			return true
		}
	}
}

// remove deletes id (whose key hashes to h) if present.
func (s *idSet) remove(h, id uint32, kt *keyTable) bool {
	i := s.pos(h, id)
	if i < 0 {
		return false
	}
	s.n--
	if s.slots[s.next(i)] != emptySlot {
		s.slots[i] = tombSlot
		s.tombs++
	} else {
		// Nothing probes past an empty slot: this one and the deleted
		// ones before it become empty.
		s.slots[i] = emptySlot
		for j := i - 1; ; j-- {
			if j < 0 {
				j = len(s.slots) - 1
			}
			if s.slots[j] != tombSlot {
				break
			}
			s.slots[j] = emptySlot
			s.tombs--
		}
	}
	if len(s.slots) > 16 && int(s.n)*5 < len(s.slots) {
		s.rehash(int(s.n), kt)
	}
	return true
}

// rehash rebuilds the table for n ids at load 0.55 (small sets, whose
// slots cost little next to the moves, at 0.5), dropping deleted slots.
// Grown at load 0.8, a set grows 1.45× at a time.
func (s *idSet) rehash(n int, kt *keyTable) {
	old := s.slots
	size := n*20/11 + 2
	if n < 64 {
		size = 2*n + 2
	}
	s.slots = make([]uint32, size)
	s.tombs = 0
	for _, v := range old {
		if v == emptySlot || v == tombSlot {
			continue
		}
		i := s.home(kt.hash(v - 1))
		for s.slots[i] != emptySlot {
			i = s.next(i)
		}
		s.slots[i] = v
	}
}

// only returns the id of a set holding exactly one.
func (s *idSet) only() uint32 {
	for _, v := range s.slots {
		if v != emptySlot && v != tombSlot {
			return v - 1
		}
	}
	panic("dbinformer: empty index set")
}

// valueSet is the keys of one index value: one inline (set == nil, one =
// id+1) or two and more in set.
type valueSet struct {
	one uint32
	set *idSet
}

func (vs valueSet) len() int {
	if vs.set == nil {
		return 1
	}
	return int(vs.set.n)
}

// each calls f with every id.
func (vs valueSet) each(f func(id uint32)) {
	if vs.set == nil {
		f(vs.one - 1)
		return
	}
	for _, v := range vs.set.slots {
		if v != emptySlot && v != tombSlot {
			f(v - 1)
		}
	}
}

// index is one index: value → the ids of the keys that have it.
type index map[string]valueSet

// add puts id (whose key hashes to h) under value; false if it was there.
// With own set, value shares a checkpoint block the index must not keep
// (Indexer.loadEmpty): it is copied before it is stored (a map assignment
// stores the key given, also over an equal one).
func (x index) add(value string, h, id uint32, kt *keyTable, own bool) bool {
	vs, ok := x[value]
	if own && (!ok || vs.set == nil && vs.one != id+1) {
		value = strings.Clone(value)
	}
	switch {
	case !ok:
		x[value] = valueSet{one: id + 1}
	case vs.set == nil:
		if vs.one == id+1 {
			return false
		}
		s := &idSet{}
		s.insert(kt.hash(vs.one-1), vs.one-1, kt)
		s.insert(h, id, kt)
		x[value] = valueSet{set: s}
	default:
		if !vs.set.insert(h, id, kt) {
			return false
		}
	}
	kt.ref(id)
	return true
}

// addAll puts ids under value, each holding a reference already (an id
// there already, or twice in ids, gives its extra one back): add for many
// ids at once, the set made for all of them first.
func (x index) addAll(value string, ids []uint32, kt *keyTable) {
	vs, ok := x[value]
	if !ok && len(ids) == 1 {
		x[value] = valueSet{one: ids[0] + 1}
		return
	}
	s := vs.set
	if s == nil {
		s = &idSet{}
		n := len(ids)
		if ok {
			n++
		}
		s.rehash(n, kt)
		if ok {
			s.insert(kt.hash(vs.one-1), vs.one-1, kt)
		}
		x[value] = valueSet{set: s}
	} else {
		s.rehash(int(s.n)+len(ids), kt)
	}
	for _, id := range ids {
		if !s.insert(kt.hash(id), id, kt) {
			kt.unref(id)
		}
	}
	if s.n == 1 {
		// One key, listed more than once: inline, as add would leave it
		// (remove takes a set to inline at one key, never to none).
		x[value] = valueSet{one: s.only() + 1}
	}
}

// remove takes id (whose key hashes to h) from value; false if it was not
// there.
func (x index) remove(value string, h, id uint32, kt *keyTable) bool {
	vs, ok := x[value]
	switch {
	case !ok:
		return false
	case vs.set == nil:
		if vs.one != id+1 {
			return false
		}
		delete(x, value)
	default:
		if !vs.set.remove(h, id, kt) {
			return false
		}
		if vs.set.n == 1 {
			// A copy: value may come from an object loaded from a
			// checkpoint, sharing its block (a map assignment stores
			// the key given, also over an equal one).
			x[strings.Clone(value)] = valueSet{one: vs.set.only() + 1}
		}
	}
	kt.unref(id)
	return true
}

// lookup finds the id of key under value.
func (x index) lookup(value string, h uint32, key string, kt *keyTable) (uint32, bool) {
	vs, ok := x[value]
	switch {
	case !ok:
		return 0, false
	case vs.set == nil:
		return vs.one - 1, kt.key(vs.one-1) == key
	}
	return vs.set.lookup(h, key, kt)
}

// purge removes id from every value (the slow path when the values it was
// filed under cannot be recomputed).
func (x index) purge(id uint32, kt *keyTable) {
	h := kt.hash(id)
	for v := range x {
		x.remove(v, h, id, kt)
	}
}
