package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/maphash"
	"io"
	"runtime"
	"sync"
	"unsafe"

	codecs "github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/internal/inplace"
)

// Reading a checkpoint: its chunks are decoded in parallel into the pages
// an Indexer serves them from; checkpointformat.go writes them.

// loaded is a decoded checkpoint's objects, chunk by chunk (in the order
// they were written), so that decoding in parallel needs no final copy,
// and the base an Indexer serves them from (the same pages).
type loaded[T any] struct {
	parts []*loadedPart[T]
	n     int
	base  *itemBase[T]
	// later holds the objects written in a state later than the
	// checkpoint's version, with that state's version.
	later map[string]ResourceVersion
}

type loadedPart[T any] struct {
	page *itemPage[T]
	err  error
}

// lazy reports whether the pages were loaded lazily.
func (l *loaded[T]) lazy() bool { return len(l.parts) > 0 && l.parts[0].page.lazy != nil }

// all yields every key and object (decoding lazy pages).
func (l *loaded[T]) all(yield func(string, T) bool) {
	for _, p := range l.parts {
		objs := p.page.objects()
		for k := range p.page.n {
			if !yield(p.page.key(k), objs[k]) {
				return
			}
		}
	}
}

// checkpointReader reads a checkpoint in blocks of checkpointBlock bytes,
// each a fresh allocation that is never written again once read, so that a
// chunk is handed on as a slice of its block: one read and one allocation
// per block instead of two reads and an allocation per chunk. A block
// lives while any string decoded from it does.
type checkpointReader struct {
	r     io.Reader
	crc   hash.Hash32
	block []byte // the unread bytes of the current block
}

const checkpointBlock = 1 << 20

// fill reads the next block.
func (c *checkpointReader) fill() error {
	b := make([]byte, checkpointBlock)
	n, err := io.ReadAtLeast(c.r, b, 1)
	if n == 0 {
		return err
	}
	c.block = b[:n]
	return nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("truncated: %w", err)
}

// next returns the next n bytes, checksummed unless raw, which nothing
// writes afterwards: a slice of the current block when they are in it,
// else a fresh copy.
func (c *checkpointReader) next(n int, raw bool) ([]byte, error) {
	if len(c.block) == 0 && n < checkpointBlock/4 {
		if err := c.fill(); err != nil {
			return nil, truncated(err)
		}
	}
	var p []byte
	if len(c.block) >= n {
		p, c.block = c.block[:n:n], c.block[n:]
	} else {
		p = make([]byte, n)
		k := copy(p, c.block)
		c.block = nil
		if _, err := io.ReadFull(c.r, p[k:]); err != nil {
			return nil, truncated(err)
		}
	}
	if !raw {
		c.crc.Write(p)
	}
	return p, nil
}

func (c *checkpointReader) ReadByte() (byte, error) {
	if len(c.block) == 0 {
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	x := c.block[0]
	c.crc.Write(c.block[:1])
	c.block = c.block[1:]
	return x, nil
}

// atEnd reports whether nothing follows.
func (c *checkpointReader) atEnd() bool {
	return len(c.block) == 0 && c.fill() == io.EOF
}

func (c *checkpointReader) uvarint(limit uint64) (uint64, error) {
	n, err := binary.ReadUvarint(c)
	if err != nil {
		return 0, fmt.Errorf("truncated or corrupt length: %w", err)
	}
	if n > limit {
		return 0, fmt.Errorf("corrupt: a length of %d", n)
	}
	return n, nil
}

func (c *checkpointReader) bytes() ([]byte, error) {
	n, err := c.uvarint(checkpointMaxItem)
	if err != nil {
		return nil, err
	}
	return c.next(int(n), false)
}

// recordReader reads a chunk's records, each a key and an object, each
// length first (uvarint).
type recordReader struct{ buf []byte }

// errShortRecord is a record that runs past its chunk.
var errShortRecord = errors.New("corrupt: a record runs past its chunk")

// next returns the next length-prefixed bytes (not copied).
func (r *recordReader) next() ([]byte, error) {
	n, k := binary.Uvarint(r.buf)
	if k <= 0 || n > uint64(len(r.buf)-k) {
		return nil, errShortRecord
	}
	p := r.buf[k : k+int(n)]
	r.buf = r.buf[k+int(n):]
	return p, nil
}

// decodeChunk decodes one chunk's n records into p; base is the index of
// its first object. The keys, and the strings of objects a Binary codec
// decodes, share the chunk's bytes, which nothing writes once read: one
// allocation per chunk instead of two per object, which is most of what a
// warm start's decoding cost. A chunk lives while any of its strings does.
// With lazy set (a codec that decodes in place whatever it encoded,
// inplace.Codec.Total), only the keys are decoded and the page
// decodes its objects when first read (itemPage). place gets each key's
// index in the chunk and hash, for the Indexer's base (buildItemBase).
func decodeChunk[T any](p *loadedPart[T], codec codecs.Codec[T], lazy inplace.Codec[T], what string, data []byte, n, base int, total uint64, place func(i int, h uint64)) {
	var keys []string
	var objs []T
	recs := make([]uint32, n)
	if lazy == nil {
		keys, objs = make([]string, n), make([]T, n)
	}
	into, _ := inplace.For[T](codec)
	arena := unsafe.String(unsafe.SliceData(data), len(data))
	k := 0
	defer func() {
		if r := recover(); r != nil {
			p.err = fmt.Errorf("object %d of %d does not decode with the codec (codec panicked)", base+k+1, total)
		}
	}()
	d := recordReader{buf: data}
	var od inplace.Decoder[T]
	if into != nil {
		od = into.NewDecoder()
	}
	// sub is the arena's copy of b, which ends where d has read to.
	sub := func(b []byte) string {
		end := len(data) - len(d.buf)
		return arena[end-len(b) : end]
	}
	for ; k < n; k++ {
		recs[k] = uint32(len(data) - len(d.buf))
		key, err := d.next()
		if err != nil {
			p.err = errors.New("corrupt: a record runs past its chunk")
			return
		}
		if keys != nil {
			keys[k] = unsafe.String(unsafe.SliceData(key), len(key)) // copied at the end
		}
		place(k, maphash.Bytes(keySeed, key))
		enc, err := d.next()
		if err != nil {
			p.err = errors.New("corrupt: a record runs past its chunk")
			return
		}
		switch {
		case lazy != nil:
		case into != nil:
			err = od.Decode(enc, sub(enc), &objs[k])
		default:
			objs[k], err = codec.Decode(enc)
		}
		if err != nil {
			p.err = fmt.Errorf("object %d of %d does not decode with the codec (%T)", base+k+1, total, err)
			return
		}
	}
	if len(d.buf) != 0 {
		p.err = errors.New("corrupt: bytes after a chunk's records")
		return
	}
	if lazy != nil {
		p.page = lazyPage(&lazyObjects[T]{data: data, recs: recs, codec: lazy, what: what})
		return
	}
	// The keys get a string of the page's own (the key table of the
	// Indexer's indexes keeps them); the objects' strings share the
	// chunk's bytes when into decoded them, and the page moves off them
	// as it changes (itemPage).
	ownStrings(keys)
	p.page = decodedPage(keys, objs)
	if into != nil {
		p.page.block = &lazyObjects[T]{data: data, recs: recs, codec: into, what: what}
	}
}

// decodeCheckpoint reads a whole checkpoint, decoding its chunks on every
// CPU; it returns the checkpoint's version only when every byte checked
// out, so that a bad checkpoint is never half-loaded. With lazy set and a
// codec that decodes in place whatever it encoded (inplace.Codec.Total),
// objects are left
// to be decoded when first read. onHeader, if set, is called with the
// version once the header has been read and matches (before the objects
// are read and checked).
func decodeCheckpoint[T any](r io.Reader, codec codecs.Codec[T], name string, lazy bool, onHeader func(ResourceVersion)) (ResourceVersion, *loaded[T], error) {
	var lz inplace.Codec[T]
	if t, ok := inplace.For[T](codec); ok && lazy && t.Total() {
		lz = t
	}
	c := &checkpointReader{r: r, crc: crc32.New(crcTable)}
	h, err := readCheckpointHeader(c, codec, name)
	if err != nil {
		return 0, nil, err
	}
	if onHeader != nil && h.mismatch == nil {
		onHeader(ResourceVersion(h.rv))
	}
	out, shape, placed, err := decodeChunks(c, h, codec, lz, name)
	if err != nil {
		return 0, nil, err
	}
	if err := checkCheckpointEnd(c, h, out); err != nil {
		return 0, nil, err
	}
	// A checksum failure says more than the codec: decode errors last.
	if h.mismatch != nil {
		return 0, nil, h.mismatch
	}
	if err := out.fileBase(shape, placed); err != nil {
		return 0, nil, err
	}
	return ResourceVersion(h.rv), out, nil
}

// checkpointHeader is what a checkpoint's header says (readCheckpointHeader),
// for the rest of the read to check the body against.
type checkpointHeader struct {
	format    uint16
	rv, count uint64
	// mismatch is set when the header is sound but not this informer's.
	mismatch error
}

// readCheckpointHeader reads and checks a checkpoint's header. A header
// that cannot be read, or names a format this build cannot read, fails
// at once; one that names another type, informer or codec is only noted
// (mismatch), because the checksum at the end must first show that it is
// not corruption.
func readCheckpointHeader[T any](c *checkpointReader, codec codecs.Codec[T], name string) (checkpointHeader, error) {
	var h checkpointHeader
	head, err := c.next(len(checkpointMagic)+2, false)
	if err != nil {
		return h, err
	}
	if string(head[:len(checkpointMagic)]) != checkpointMagic {
		return h, errors.New("not a dbinformer checkpoint (bad magic)")
	}
	h.format = binary.BigEndian.Uint16(head[len(checkpointMagic):])
	if h.format < checkpointFormatMin || h.format > checkpointFormat {
		return h, fmt.Errorf("format version %d, this build reads versions %d to %d", h.format, checkpointFormatMin, checkpointFormat)
	}
	typ, err := c.bytes()
	if err != nil {
		return h, err
	}
	// A header that does not match is reported once the checksum has
	// shown that it is not corruption; the objects are then not decoded.
	var mismatch error
	if want := typeName[T](); string(typ) != want {
		mismatch = fmt.Errorf("it holds objects of type %s, this informer's are %s", typ, want)
	}
	who, err := c.bytes()
	if err != nil {
		return h, err
	}
	if string(who) != name && mismatch == nil {
		mismatch = fmt.Errorf("it was written by informer %q", who)
	}
	cn, err := c.bytes()
	if err != nil {
		return h, err
	}
	if want := codecName(codec); string(cn) != want && mismatch == nil {
		mismatch = fmt.Errorf("it was written with codec %s, this informer's is %s", cn, want)
	}
	fixed, err := c.next(16, false)
	if err != nil {
		return h, err
	}
	h.rv, h.count = binary.BigEndian.Uint64(fixed), binary.BigEndian.Uint64(fixed[8:])
	h.mismatch = mismatch
	return h, nil
}

// decodeChunks reads a checkpoint's chunks and has them decoded on every
// CPU while the next ones are read, so that reading and decoding
// overlap. Each worker also places the keys it decodes by segment, which
// the filing of the base then uses (fileBase). With a mismatched header
// the chunks are only read, for the checksum.
func decodeChunks[T any](c *checkpointReader, h checkpointHeader, codec codecs.Codec[T], lz inplace.Codec[T], name string) (*loaded[T], baseShape, [][][]slotEntry, error) {
	count, mismatch := h.count, h.mismatch
	type job struct {
		p        *loadedPart[T]
		data     []byte
		n, first int
	}
	// Each worker places the keys it decodes by the segment of the
	// base's slots they go to, for the count the header gives; the count
	// is checked at the end.
	if count >= 1<<31 {
		return nil, baseShape{}, nil, errors.New("corrupt: too many objects")
	}
	workers := runtime.GOMAXPROCS(0)
	shape := shapeFor(int(count))
	segs := shape.segments()
	placed := make([][][]slotEntry, workers)
	jobs := make(chan job, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			bySeg := make([][]slotEntry, segs)
			if mismatch == nil {
				share := int(count)/(segs*workers) + 8
				for s := range bySeg {
					bySeg[s] = make([]slotEntry, 0, share+share/8)
				}
			}
			placed[w] = bySeg
			for j := range jobs {
				decodeChunk(j.p, codec, lz, "checkpoint "+name, j.data, j.n, j.first, count, func(i int, h uint64) {
					s := shape.segment(h)
					bySeg[s] = append(bySeg[s], slotEntry{h, j.first + i})
				})
			}
		})
	}
	out := &loaded[T]{}
	err := func() error {
		defer func() { close(jobs); wg.Wait() }()
		for {
			n, err := c.uvarint(count - uint64(out.n))
			if err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			size, err := c.uvarint(checkpointMaxChunk)
			if err != nil {
				return err
			}
			if size < 2*n {
				return errors.New("corrupt: a chunk shorter than its records")
			}
			data, err := c.next(int(size), false)
			if err != nil {
				return err
			}
			if mismatch == nil {
				p := &loadedPart[T]{}
				out.parts = append(out.parts, p)
				jobs <- job{p, data, int(n), out.n}
			}
			out.n += int(n)
		}
	}()
	return out, shape, placed, err
}

// checkCheckpointEnd reads what follows the chunks (the objects written
// in a later state, into out.later) and checks the end: the marker and
// its count against the header's and the chunks', the checksum, and that
// nothing follows. Only then is anything read trusted.
func checkCheckpointEnd[T any](c *checkpointReader, h checkpointHeader, out *loaded[T]) error {
	count := h.count
	if h.format >= 3 {
		var err error
		if out.later, err = readLater(c, count); err != nil {
			return err
		}
	}
	end, err := c.next(len(checkpointEnd)+8, false)
	if err != nil {
		return err
	}
	if string(end[:len(checkpointEnd)]) != checkpointEnd || binary.BigEndian.Uint64(end[len(checkpointEnd):]) != count || uint64(out.n) != count {
		return errors.New("corrupt: bad end marker")
	}
	sum := c.crc.Sum32()
	tail, err := c.next(4, true)
	if err != nil {
		return err
	}
	if binary.BigEndian.Uint32(tail) != sum {
		return errors.New("corrupt: checksum mismatch")
	}
	if !c.atEnd() {
		return errors.New("corrupt: bytes after the end")
	}
	return nil
}

// fileBase builds the base an Indexer serves the decoded pages from, once
// the whole checkpoint checked out: a chunk's decode error is reported
// here, after the checksum's. The keys the workers placed by segment are
// filed segment by segment; a segment too full for them falls back to
// building the base from scratch.
func (l *loaded[T]) fileBase(shape baseShape, placed [][][]slotEntry) error {
	pages := make([]*itemPage[T], len(l.parts))
	for k, p := range l.parts {
		if p.err != nil {
			return p.err
		}
		pages[k] = p.page
	}
	if _, err := checkPages(pages, checkpointChunkBits); err != nil {
		return err
	}
	var err error
	l.base, err = fileItemBase(pages, checkpointChunkBits, l.n, shape, placed)
	if err == errSegmentFull {
		l.base, err = buildItemBase(pages, nil, checkpointChunkBits)
	}
	return err
}

// readLater reads the section of objects written in a later state (at
// most count of them).
func readLater(c *checkpointReader, count uint64) (map[string]ResourceVersion, error) {
	n, err := c.uvarint(count)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	later := make(map[string]ResourceVersion, n)
	for range n {
		k, err := c.bytes()
		if err != nil {
			return nil, err
		}
		v, err := binary.ReadUvarint(c)
		if err != nil {
			return nil, fmt.Errorf("truncated or corrupt version: %w", err)
		}
		later[string(k)] = ResourceVersion(v)
	}
	return later, nil
}
