package core

import (
	"errors"
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/dbinformer/dbinformer/core/internal/inplace"
)

// The item base: a checkpoint's (or an initial list's) pages (itempage.go),
// filed once into an open-addressing table the Indexer serves reads from;
// itemtable.go holds the map the Indexer writes to.

// itemBase is a checkpoint's objects in pages of 1<<pageBits (the last may
// hold fewer), found through slots: an open-addressing table, at most half
// full, of tag<<32 | position+1 (0 is empty), where tag is the low half of
// the key's hash, so that a probe reads a key only when its tag matches. A
// key's home slot is the top bits of its hash, and probing wraps within
// the segment (of at most 1<<segmentBits slots) the home slot is in: the
// table is built segment by segment, each small enough to stay in a
// CPU's cache and written by one goroutine (see buildItemBase).
type itemBase[T any] struct {
	pages    []*itemPage[T]
	pageBits uint
	n        int // positions
	slots    []uint64
	shift    uint     // a home slot is hash >> shift
	segMask  uint64   // a segment's slots - 1
	deadBits []uint64 // nil until the first delete
	dead     int
	// movedBits marks the positions written or deleted since the load,
	// in pages still on their checkpoint block (touch); nil until the
	// first.
	movedBits []uint64
}

// segmentBits: 32,768 slots (256 KiB) per segment.
const segmentBits = 15

func (b *itemBase[T]) next(i uint64) uint64 { return i&^b.segMask | (i+1)&b.segMask }

func (b *itemBase[T]) key(pos int) string {
	return b.pages[pos>>b.pageBits].key(pos & (1<<b.pageBits - 1))
}

func (b *itemBase[T]) obj(pos int) *T {
	return &b.pages[pos>>b.pageBits].objects()[pos&(1<<b.pageBits-1)]
}

// peekObj is the object at pos for a reader that lets go of it before
// the Indexer's read lock it holds (a checkpoint's write): an object of a
// lazy page no one has read yet is decoded for the caller alone, its
// strings sharing the checkpoint block, and the page stays lazy. Reading
// it with obj would decode the whole page and keep it decoded: a
// checkpoint's write, reading every object, turned every lazily loaded
// page into decoded objects that, their strings sharing the blocks, kept
// every block of the checkpoint alive as well (BenchmarkWarmRestartMemory).
// *d is the caller's decoder, reused across calls (made at the first
// lazy page when nil).
func (b *itemBase[T]) peekObj(pos int, d *inplace.Decoder[T]) T {
	p := b.pages[pos>>b.pageBits]
	if l := p.lazy; l != nil && p.objs.Load() == nil {
		// No object of the page was read or written (a write decodes
		// the page first): the record is the object.
		if *d == nil {
			*d = l.codec.NewDecoder()
		}
		var o T
		l.decodeAt(*d, pos&(1<<b.pageBits-1), &o)
		return o
	}
	return *b.obj(pos)
}

// ownedObj is the object at pos, decoded again into strings of its own
// if it is still as loaded on a page whose objects share the block.
func (b *itemBase[T]) ownedObj(pos int) T {
	p := b.pages[pos>>b.pageBits]
	if l := p.block; l != nil && l.codec != nil && !b.moved(pos) {
		i := pos & (1<<b.pageBits - 1)
		key, enc := l.record(i)
		var o T
		l.decode(l.codec.NewDecoder(), i, key, enc, "", &o)
		return o
	}
	return *b.obj(pos)
}

func (b *itemBase[T]) find(key string) (int, bool) {
	h := maphash.String(keySeed, key)
	tag := h << 32
	for i := h >> b.shift; ; i = b.next(i) {
		s := b.slots[i]
		if s == 0 {
			return 0, false
		}
		if s&^(1<<32-1) == tag {
			if pos := int(uint32(s)) - 1; b.key(pos) == key {
				return pos, true
			}
		}
	}
}

func (b *itemBase[T]) isDead(pos int) bool {
	return b.deadBits != nil && b.deadBits[pos>>6]&(1<<(pos&63)) != 0
}

// put stores obj at pos, live, and returns what was there.
func (b *itemBase[T]) put(pos int, obj T) (old T, existed bool) {
	p := b.obj(pos)
	old, existed = *p, !b.isDead(pos)
	*p = obj
	b.revive(pos)
	b.touch(pos)
	return old, existed
}

// kill marks pos deleted and lets go of its object (if it was decoded).
func (b *itemBase[T]) kill(pos int) {
	if b.markDead(pos) {
		if o := b.pages[pos>>b.pageBits].objs.Load(); o != nil {
			var zero T
			(*o)[pos&(1<<b.pageBits-1)] = zero
		}
		b.touch(pos)
	}
}

// touch notes that pos no longer holds the object loaded; once a quarter
// of its page's objects have moved, the page moves off its checkpoint
// block (unpin). A page is unpinned after n/4 writes to it at the cost of
// decoding n objects at most: amortized, a few decodings per write.
func (b *itemBase[T]) touch(pos int) {
	pg := pos >> b.pageBits
	p := b.pages[pg]
	if p.block == nil {
		return
	}
	if b.movedBits == nil {
		b.movedBits = make([]uint64, (b.n+63)/64)
	}
	if b.movedBits[pos>>6]&(1<<(pos&63)) != 0 {
		return
	}
	b.movedBits[pos>>6] |= 1 << (pos & 63)
	p.moved++
	if p.moved*4 >= p.n {
		b.unpin(pg)
	}
}

func (b *itemBase[T]) moved(pos int) bool {
	return b.movedBits != nil && b.movedBits[pos>>6]&(1<<(pos&63)) != 0
}

// unpin moves page pg off its checkpoint block: its keys go into one
// string of the page's own (a decoded page's have one already), and its live objects still as loaded are
// decoded again with strings of their own (all of them if the page was
// not decoded yet). What the page holds then shares nothing with the
// block, which the GC frees once no page and no object a reader kept
// holds a string of it.
func (b *itemBase[T]) unpin(pg int) {
	p := b.pages[pg]
	l := p.block
	if l == nil {
		return
	}
	first := pg << b.pageBits
	objs := p.objs.Load()
	switch {
	case objs == nil:
		// Lazy, never read: decode the live ones, with strings of
		// their own.
		o := make([]T, p.n)
		d := l.codec.NewDecoder()
		for i := range o {
			if !b.isDead(first + i) {
				key, enc := l.record(i)
				l.decode(d, i, key, enc, "", &o[i])
			}
		}
		objs = &o
	case l.codec != nil:
		d := l.codec.NewDecoder()
		for i := range *objs {
			if pos := first + i; !b.isDead(pos) && !b.moved(pos) {
				key, enc := l.record(i)
				var o T
				l.decode(d, i, key, enc, "", &o)
				(*objs)[i] = o
			}
		}
	}
	if p.keys == nil {
		p.keys = l.keys()
	}
	p.objs.Store(objs)
	p.lazy, p.block = nil, nil
}

// unpinAll moves every page off its checkpoint block.
func (b *itemBase[T]) unpinAll() {
	for pg := range b.pages {
		b.unpin(pg)
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
		objs := p.objects()
		for i := range p.n {
			if !b.isDead(pos + i) {
				if !yield(p.key(i), objs[i]) {
					return
				}
			}
		}
		pos += p.n
	}
}

// baseShape is the geometry of a base's slots for n keys: 1<<l slots, at
// least twice n, in segments of 1<<segBits.
type baseShape struct {
	l, segBits uint
}

func shapeFor(n int) baseShape {
	l := uint(bits.Len64(uint64(2 * n)))
	return baseShape{l, min(l, segmentBits)}
}

func (sh baseShape) segments() int { return 1 << (sh.l - sh.segBits) }

// segment is the segment of the home slot of a key hashing to h.
func (sh baseShape) segment(h uint64) int {
	if sh.l == 0 {
		return 0
	}
	return int(h >> (64 - sh.l) >> sh.segBits)
}

// slotEntry is a key to file: its hash and position.
type slotEntry struct {
	h   uint64
	pos int
}

// buildItemBase indexes pages on every CPU. hashes, if not nil, holds
// every key's hash (maphash with keySeed), page by page.
//
// Filing a million keys straight into a table of 16 MiB cost a cache miss
// each, about 90 ns, most of a lazy load (BenchmarkWarmStart). Instead the
// keys are first placed by segment (here, counted and then placed in two
// passes over the hashes, writing in sequence; a checkpoint's decoding
// places them as it goes, segmentKeys), then each segment's keys are
// filed into its slots, which fit in a CPU's cache, by one goroutine
// without atomics (fileItemBase).
func buildItemBase[T any](pages []*itemPage[T], hashes [][]uint64, pageBits uint) (*itemBase[T], error) {
	n, err := checkPages(pages, pageBits)
	if err != nil {
		return nil, err
	}
	workers := max(1, min(runtime.GOMAXPROCS(0), len(pages)))
	if hashes == nil {
		hashes = make([][]uint64, len(pages))
		parallel(workers, func(w int) {
			for pg := w; pg < len(pages); pg += workers {
				hs := make([]uint64, pages[pg].n)
				for i := range hs {
					hs[i] = maphash.String(keySeed, pages[pg].key(i))
				}
				hashes[pg] = hs
			}
		})
	}
	for sh := shapeFor(n); ; sh.l++ {
		// Worker w counts and places the keys of the pages from
		// firstPage(w) on; at[w][s] is where its next key of segment s
		// goes.
		segs := sh.segments()
		firstPage := func(w int) int { return len(pages) * w / workers }
		at := make([][]int, workers)
		parallel(workers, func(w int) {
			c := make([]int, segs)
			for pg := firstPage(w); pg < firstPage(w+1); pg++ {
				for _, h := range hashes[pg] {
					c[sh.segment(h)]++
				}
			}
			at[w] = c
		})
		start := make([]int, segs+1)
		for s := range segs {
			start[s+1] = start[s]
			for w := range workers {
				c := at[w][s]
				at[w][s] = start[s+1]
				start[s+1] += c
			}
		}
		placed := make([]slotEntry, n)
		parallel(workers, func(w int) {
			a := at[w]
			for pg := firstPage(w); pg < firstPage(w+1); pg++ {
				for i, h := range hashes[pg] {
					s := sh.segment(h)
					placed[a[s]] = slotEntry{h, pg<<pageBits + i}
					a[s]++
				}
			}
		})
		bySeg := make([][]slotEntry, segs)
		for s := range segs {
			bySeg[s] = placed[start[s]:start[s+1]]
		}
		b, err := fileItemBase(pages, pageBits, n, sh, [][][]slotEntry{bySeg})
		if err != errSegmentFull {
			return b, err
		}
	}
}

// checkPages returns the number of objects in pages, every one of which
// but the last must hold 1<<pageBits.
func checkPages[T any](pages []*itemPage[T], pageBits uint) (int, error) {
	n := 0
	for i, p := range pages {
		if p.n > 1<<pageBits || (i < len(pages)-1 && p.n != 1<<pageBits) {
			return 0, errors.New("corrupt: a chunk of the wrong size")
		}
		n += p.n
	}
	if n >= 1<<31 {
		return 0, errors.New("corrupt: too many objects")
	}
	return n, nil
}

// parallel runs f(w) for w in [0, workers) at once and waits.
func parallel(workers int, f func(w int)) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { f(w) })
	}
	wg.Wait()
}

var errSegmentFull = errors.New("a segment is too full")

// fileItemBase builds the base of pages (n objects) with shape sh from the
// keys placed by segment: parts[k][s] is a list of segment s's keys. It
// returns errSegmentFull if a segment would be more than seven eighths
// full: a hash this uneven is all but impossible, and a table twice the
// size takes it.
func fileItemBase[T any](pages []*itemPage[T], pageBits uint, n int, sh baseShape, parts [][][]slotEntry) (*itemBase[T], error) {
	segs := sh.segments()
	for s := range segs {
		c := 0
		for _, p := range parts {
			c += len(p[s])
		}
		if c > (1<<sh.segBits)*7/8 {
			return nil, errSegmentFull
		}
	}
	b := &itemBase[T]{pages: pages, pageBits: pageBits, n: n, shift: 64 - sh.l, segMask: 1<<sh.segBits - 1, slots: make([]uint64, 1<<sh.l)}
	var next atomic.Int64 // the next segment to file
	var repeat atomic.Bool
	parallel(max(1, min(runtime.GOMAXPROCS(0), segs)), func(int) {
		for !repeat.Load() {
			s := int(next.Add(1)) - 1
			if s >= segs {
				return
			}
			// Touch the segment's slots in order first: the hardware
			// brings in sequential lines ahead of use, the random writes
			// below then find them in the cache (half the filing time
			// went to waiting on them).
			seg := b.slots[s<<sh.segBits : (s+1)<<sh.segBits]
			for i := 0; i < len(seg); i += 8 {
				seg[i] = 0
			}
			for _, p := range parts {
				for _, e := range p[s] {
					if !b.file(e.h, e.pos) {
						repeat.Store(true)
						return
					}
				}
			}
		}
	})
	if repeat.Load() {
		return nil, errors.New("corrupt: a key appears twice")
	}
	return b, nil
}

// file puts pos, whose key hashes to h, in its slot; false if the key is
// there already.
func (b *itemBase[T]) file(h uint64, pos int) bool {
	tag := h << 32
	for i := h >> b.shift; ; i = b.next(i) {
		s := b.slots[i]
		if s == 0 {
			b.slots[i] = tag | uint64(pos+1)
			return true
		}
		if s&^(1<<32-1) == tag && b.key(int(uint32(s))-1) == b.key(pos) {
			return false
		}
	}
}
