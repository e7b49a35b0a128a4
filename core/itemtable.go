package core

import (
	"errors"
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// items is the Indexer's key → object table: a Go map, and, after a warm
// start, a frozen base holding the checkpoint's objects.
//
// A base is what makes a warm start cheap. Filling a Go map with a million
// keys costs 150–330 ms on the machines BENCHMARKS.md runs on (one cache
// miss per key, on one core), more than decoding the checkpoint; a base
// keeps the decoded pages as they are and adds an open-addressing table of
// positions, which every CPU fills at once (BenchmarkWarmStart). Writes
// after the load update a base object in place, delete it by marking its
// position dead, and put keys the base never had in the map: a key lives in
// the base or in the map, never both. When half the base is dead its live
// objects move to the map and the base goes, so that a cache whose keys
// all changed since the load does not hold the old ones.
type items[T any] struct {
	m    map[string]T
	base *itemBase[T]
}

func newItems[T any](n int) items[T] { return items[T]{m: make(map[string]T, n)} }

func (t *items[T]) get(key string) (T, bool) {
	if b := t.base; b != nil {
		if pos, ok := b.find(key); ok {
			if b.isDead(pos) {
				var zero T
				return zero, false
			}
			return *b.obj(pos), true
		}
	}
	obj, ok := t.m[key]
	return obj, ok
}

// at is get for a key known to be there (an index names it).
func (t *items[T]) at(key string) T {
	obj, _ := t.get(key)
	return obj
}

func (t *items[T]) set(key string, obj T) {
	if b := t.base; b != nil {
		if pos, ok := b.find(key); ok {
			*b.obj(pos) = obj
			b.revive(pos)
			return
		}
	}
	t.m[key] = obj
}

func (t *items[T]) del(key string) {
	b := t.base
	if b == nil {
		delete(t.m, key)
		return
	}
	pos, ok := b.find(key)
	if !ok {
		delete(t.m, key)
		return
	}
	b.kill(pos)
	if b.dead*2 > b.n {
		t.fold()
	}
}

// fold moves the base's live objects into the map and drops the base.
func (t *items[T]) fold() {
	b := t.base
	t.base = nil
	m := make(map[string]T, len(t.m)+b.n-b.dead)
	for k, o := range t.m {
		m[k] = o
	}
	for k, o := range b.all {
		m[k] = o
	}
	t.m = m
}

func (t *items[T]) len() int {
	n := len(t.m)
	if b := t.base; b != nil {
		n += b.n - b.dead
	}
	return n
}

// all yields every key and object: the base's live ones, then the map's.
func (t *items[T]) all(yield func(string, T) bool) {
	if b := t.base; b != nil {
		for k, o := range b.all {
			if !yield(k, o) {
				return
			}
		}
	}
	for k, o := range t.m {
		if !yield(k, o) {
			return
		}
	}
}

// itemPage is one decoded checkpoint chunk: keys[i] holds objs[i].
type itemPage[T any] struct {
	keys []string
	objs []T
}

// itemBase is a checkpoint's objects in pages of 1<<pageBits (the last may
// hold fewer), found through slots: an open-addressing table, linear
// probing, at most half full, of tag<<32 | position+1 (0 is empty), where
// tag is the key hash's high half, so that a probe reads a key only when
// its tag matches.
type itemBase[T any] struct {
	pages    []itemPage[T]
	pageBits uint
	n        int // positions
	slots    []uint64
	mask     uint64
	deadBits []uint64 // nil until the first delete
	dead     int
}

func (b *itemBase[T]) key(pos int) string {
	return b.pages[pos>>b.pageBits].keys[pos&(1<<b.pageBits-1)]
}

func (b *itemBase[T]) obj(pos int) *T {
	return &b.pages[pos>>b.pageBits].objs[pos&(1<<b.pageBits-1)]
}

func (b *itemBase[T]) find(key string) (int, bool) {
	h := maphash.String(keySeed, key)
	tag := h >> 32
	for i := h & b.mask; ; i = (i + 1) & b.mask {
		s := b.slots[i]
		if s == 0 {
			return 0, false
		}
		if s>>32 == tag {
			if pos := int(uint32(s)) - 1; b.key(pos) == key {
				return pos, true
			}
		}
	}
}

func (b *itemBase[T]) isDead(pos int) bool {
	return b.deadBits != nil && b.deadBits[pos>>6]&(1<<(pos&63)) != 0
}

// kill marks pos deleted and lets go of its object.
func (b *itemBase[T]) kill(pos int) {
	if b.markDead(pos) {
		var zero T
		*b.obj(pos) = zero
	}
}

// markDead marks pos deleted; false if it was already.
func (b *itemBase[T]) markDead(pos int) bool {
	if b.isDead(pos) {
		return false
	}
	if b.deadBits == nil {
		b.deadBits = make([]uint64, (b.n+63)/64)
	}
	b.deadBits[pos>>6] |= 1 << (pos & 63)
	b.dead++
	return true
}

func (b *itemBase[T]) revive(pos int) {
	if b.isDead(pos) {
		b.deadBits[pos>>6] &^= 1 << (pos & 63)
		b.dead--
	}
}

// all yields the live keys and objects.
func (b *itemBase[T]) all(yield func(string, T) bool) {
	pos := 0
	for _, p := range b.pages {
		for i, k := range p.keys {
			if !b.isDead(pos + i) {
				if !yield(k, p.objs[i]) {
					return
				}
			}
		}
		pos += len(p.keys)
	}
}

var errRepeatedKey = errors.New("corrupt: a key appears twice")

// newItemBase indexes pages, every one of which but the last holds
// 1<<pageBits objects, on every CPU. It fails if a key repeats.
func newItemBase[T any](pages []itemPage[T], pageBits uint) (*itemBase[T], error) {
	b := &itemBase[T]{pages: pages, pageBits: pageBits}
	for i, p := range pages {
		if len(p.keys) != len(p.objs) || len(p.keys) > 1<<pageBits || (i < len(pages)-1 && len(p.keys) != 1<<pageBits) {
			return nil, errors.New("corrupt: a chunk of the wrong size")
		}
		b.n += len(p.keys)
	}
	if b.n >= 1<<32-1 {
		return nil, errors.New("corrupt: too many objects")
	}
	size := uint64(1) << bits.Len64(uint64(2*b.n)) // more than twice n: at most half full
	b.slots, b.mask = make([]uint64, size), size-1
	var (
		next   atomic.Int64 // the next page to index
		repeat atomic.Bool
		wg     sync.WaitGroup
	)
	for range max(1, min(runtime.GOMAXPROCS(0), len(pages))) {
		wg.Go(func() {
			for !repeat.Load() {
				pg := int(next.Add(1)) - 1
				if pg >= len(pages) {
					return
				}
				for i, k := range pages[pg].keys {
					if !b.insert(k, pg<<pageBits+i) {
						repeat.Store(true)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if repeat.Load() {
		return nil, errRepeatedKey
	}
	return b, nil
}

// insert files key at pos while other goroutines insert too; false if the
// key is there already.
func (b *itemBase[T]) insert(key string, pos int) bool {
	h := maphash.String(keySeed, key)
	v := h>>32<<32 | uint64(pos+1)
	for i := h & b.mask; ; i = (i + 1) & b.mask {
		s := atomic.LoadUint64(&b.slots[i])
		if s == 0 {
			if atomic.CompareAndSwapUint64(&b.slots[i], 0, v) {
				return true
			}
			s = atomic.LoadUint64(&b.slots[i])
		}
		if s>>32 == h>>32 && b.key(int(uint32(s))-1) == key {
			return false
		}
	}
}
