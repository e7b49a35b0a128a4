package core

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/dbinformer/dbinformer/core/internal/inplace"
)

// The item base's pages: a checkpoint's chunks or an initial list's
// objects, decoded or to be decoded (itembase.go files them).

// itemPage is one checkpoint chunk of n objects. A page is decoded when
// the chunk is read (keys and objs), or lazily: it keeps the chunk's bytes
// and where each record starts, reads a key from the bytes when asked,
// and decodes all its objects the first time one of them is read. Until
// then a lazy page holds no pointer but its chunk's, so the GC scans
// nothing of it: loading a checkpoint of a million objects lazily serves
// its first read within a tenth of the time a list takes
// (BenchmarkWarmStart).
//
// A checkpoint page's keys, and the strings of the objects a Binary codec
// decoded, share the checkpoint block its chunk was read into (1 MiB,
// several chunks): one string of it keeps the whole block. So that a base
// whose objects change does not keep the blocks of the values they had,
// a page moves off its block once a quarter of its objects were written
// or deleted (itemBase.touch, unpin): its keys are copied into one string
// of the page's own and the objects still as loaded are decoded again
// into strings of their own.
type itemPage[T any] struct {
	n    int
	keys []string            // decoded pages, and pages off their block
	objs atomic.Pointer[[]T] // nil until decoded
	lazy *lazyObjects[T]     // lazy pages, until unpinned
	mu   sync.Mutex          // one decoding at a time

	// block is the records the page's keys, and objects' strings if
	// block.codec is set, share a checkpoint block with; nil for a page
	// that shares none (a list's, or one unpinned). It and moved change
	// under the Indexer's write lock only.
	block *lazyObjects[T]
	moved int // objects written or deleted since the load
}

// lazyObjects is what a lazy page reads its keys and decodes its objects
// from. It never changes once made: a handler replaying a page's loaded
// objects reads it while the page changes.
type lazyObjects[T any] struct {
	data  []byte   // the chunk; keys and decoded strings share its bytes
	recs  []uint32 // where each record (key, then object, each length first) starts in data
	codec inplace.Codec[T]
	what  string // names the checkpoint in a decoding failure
}

func decodedPage[T any](keys []string, objs []T) *itemPage[T] {
	p := &itemPage[T]{n: len(keys), keys: keys}
	p.objs.Store(&objs)
	return p
}

func lazyPage[T any](l *lazyObjects[T]) *itemPage[T] {
	return &itemPage[T]{n: len(l.recs), lazy: l, block: l}
}

// key returns the i-th key.
func (p *itemPage[T]) key(i int) string {
	if p.keys != nil {
		return p.keys[i]
	}
	k, _ := p.lazy.record(i)
	return k
}

// record returns the i-th record's key and encoded object, sharing data.
func (l *lazyObjects[T]) record(i int) (key string, enc []byte) {
	rec := l.data[l.recs[i]:]
	n, w := binary.Uvarint(rec)
	rec = rec[w:]
	if n > 0 {
		key = unsafe.String(&rec[0], n)
	}
	rec = rec[n:]
	m, w := binary.Uvarint(rec)
	return key, rec[w : w+int(m)]
}

// objects returns the page's objects, decoding them first if need be.
// Readers holding the Indexer's read lock may call it at once: the first
// decodes, the others wait for it.
func (p *itemPage[T]) objects() []T {
	if o := p.objs.Load(); o != nil {
		return *o
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if o := p.objs.Load(); o != nil {
		return *o
	}
	objs := p.lazy.decodeLoaded()
	p.objs.Store(&objs)
	return objs
}

// decodeLoaded decodes the objects as they were loaded, into a new slice;
// their strings share the chunk's bytes.
func (l *lazyObjects[T]) decodeLoaded() []T {
	objs := make([]T, len(l.recs))
	d := l.codec.NewDecoder()
	for i := range objs {
		l.decodeAt(d, i, &objs[i])
	}
	return objs
}

// decodeAt decodes record i into dst, its strings sharing the chunk's
// bytes.
func (l *lazyObjects[T]) decodeAt(d inplace.Decoder[T], i int, dst *T) {
	key, enc := l.record(i)
	at := int(uintptr(unsafe.Pointer(unsafe.SliceData(enc))) - uintptr(unsafe.Pointer(unsafe.SliceData(l.data))))
	l.decode(d, i, key, enc, unsafe.String(unsafe.SliceData(l.data), len(l.data))[at:at+len(enc)], dst)
}

// decode decodes record i (key, enc) into dst, taking its strings from
// arena (a copy of enc), or allocating them if arena is "".
func (l *lazyObjects[T]) decode(d inplace.Decoder[T], i int, key string, enc []byte, arena string, dst *T) {
	if err := d.Decode(enc, arena, dst); err != nil {
		// The checkpoint's checksum, its codec's schema and the codec
		// (lazy pages are only made with a codec that decodes whatever
		// it encoded; a decoded page's objects were decoded from these
		// bytes once) all vouched for these bytes: this is a bug.
		panic(fmt.Sprintf("dbinformer: %s: object %d (key %q) of a checked checkpoint does not decode (please report this bug): %v", l.what, i, key, err))
	}
}

// keys returns the records' keys in one string of their own.
func (l *lazyObjects[T]) keys() []string {
	keys := make([]string, len(l.recs))
	for i := range keys {
		keys[i], _ = l.record(i)
	}
	ownStrings(keys)
	return keys
}

// ownStrings copies ss into one new string, the elements becoming its
// substrings: one allocation, sharing nothing with what they shared.
func ownStrings(ss []string) {
	size := 0
	for _, s := range ss {
		size += len(s)
	}
	buf := make([]byte, 0, size)
	for _, s := range ss {
		buf = append(buf, s...)
	}
	all := unsafe.String(unsafe.SliceData(buf), len(buf))
	at := 0
	for i, s := range ss {
		ss[i] = all[at : at+len(s)]
		at += len(s)
	}
}
