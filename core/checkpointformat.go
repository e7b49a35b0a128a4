package core

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"runtime"
	"sync"
	"unsafe"
)

// The checkpoint format, version 2: magic, format version (uint16), the
// object type, the checkpoint's name, the codec (its Go type, and its
// Schema when it has one, so that objects are never decoded by another
// codec or another layout), the version and the count of objects; then
// the objects in chunks, each a uvarint count of objects and a uvarint
// length in bytes followed by, per object, the key and the encoded object,
// each preceded by its length (uvarint); a chunk of zero objects ends
// them; every chunk but the last holds checkpointChunk objects, so that a
// loaded chunk is a page of the Indexer's base (itemtable.go) as it is.
// Then the end magic, the count again and a CRC-32C of every byte before
// it. Fixed-size integers are big-endian. Chunks let a load decode objects
// on every CPU and a save encode them so. Version 1 (one run of
// objects, no codec) is refused: the informer lists instead.
const (
	checkpointMagic     = "DBINFCKP"
	checkpointEnd       = "DBINFEND"
	checkpointFormat    = 2
	checkpointMaxItem   = 1 << 30
	checkpointChunkBits = 9
	checkpointChunk     = 1 << checkpointChunkBits // objects per chunk: every chunk but the last holds this many
	checkpointMaxChunk  = 1 << 30                  // bytes per chunk read
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// typeName names T in a checkpoint, so that a checkpoint of another type is
// refused rather than decoded into the wrong one.
func typeName[T any]() string { return fmt.Sprintf("%T", *new(T)) }

// codecName names a codec in a checkpoint.
func codecName[T any](c Codec[T]) string {
	if s, ok := c.(interface{ Schema() string }); ok {
		return fmt.Sprintf("%T %s", c, s.Schema())
	}
	return fmt.Sprintf("%T", c)
}

// appendEncoder is implemented by codecs that append to a buffer (Binary).
type appendEncoder[T any] interface {
	AppendEncode(dst []byte, obj T) ([]byte, error)
}

// encodeChunk appends the records of keys/objs (the first at index base)
// to dst.
func encodeChunk[T any](dst []byte, codec Codec[T], base, total int, keys []string, objs []T) (_ []byte, err error) {
	app, _ := codec.(appendEncoder[T])
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("codec panicked: %v", r)
		}
	}()
	var lenBuf [binary.MaxVarintLen64]byte
	for n, key := range keys {
		dst = binary.AppendUvarint(dst, uint64(len(key)))
		dst = append(dst, key...)
		if app != nil {
			// Room for the length, moved into place once the size is known.
			at := len(dst)
			dst = append(dst, lenBuf[:]...)
			var out []byte
			if out, err = app.AppendEncode(dst, objs[n]); err == nil {
				size := len(out) - at - len(lenBuf)
				l := binary.PutUvarint(lenBuf[:], uint64(size))
				copy(out[at:], lenBuf[:l])
				copy(out[at+l:], out[at+len(lenBuf):])
				dst = out[:at+l+size]
			}
		} else {
			var data []byte
			if data, err = codec.Encode(objs[n]); err == nil {
				dst = binary.AppendUvarint(dst, uint64(len(data)))
				dst = append(dst, data...)
			}
		}
		if err != nil {
			// The codec's message may quote the object: name only its type.
			return nil, fmt.Errorf("object %d of %d does not encode with the codec (%T)", base+n+1, total, err)
		}
	}
	return dst, nil
}

// encodeCheckpoint writes the objects in keys/objs (at rv) to w, encoding
// chunks on every CPU.
func encodeCheckpoint[T any](w io.Writer, codec Codec[T], name string, rv ResourceVersion, keys []string, objs []T) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	crc := crc32.New(crcTable)
	out := io.MultiWriter(bw, crc)
	head := append([]byte(checkpointMagic), 0, 0)
	binary.BigEndian.PutUint16(head[len(checkpointMagic):], checkpointFormat)
	for _, s := range []string{typeName[T](), name, codecName(codec)} {
		head = binary.AppendUvarint(head, uint64(len(s)))
		head = append(head, s...)
	}
	head = binary.BigEndian.AppendUint64(head, uint64(rv))
	head = binary.BigEndian.AppendUint64(head, uint64(len(keys)))
	if _, err := out.Write(head); err != nil {
		return err
	}
	type result struct {
		data []byte
		n    int
		err  error
	}
	chunks := (len(keys) + checkpointChunk - 1) / checkpointChunk
	workers := max(1, min(runtime.GOMAXPROCS(0), chunks))
	// Each chunk's result arrives on its own channel, written in order;
	// at most 2×workers chunks are encoded ahead of the writer.
	results := make(chan chan result, 2*workers)
	stop := make(chan struct{})
	// Chunk buffers are reused once written: fresh memory for each chunk
	// cost more (page faults) than encoding into it.
	var bufs sync.Pool
	var wg sync.WaitGroup
	go func() {
		defer close(results)
		sem := make(chan struct{}, workers)
		for c := range chunks {
			ch := make(chan result, 1)
			select {
			case results <- ch:
			case <-stop:
				return
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				lo, hi := c*checkpointChunk, min((c+1)*checkpointChunk, len(keys))
				buf, _ := bufs.Get().([]byte)
				data, err := encodeChunk(buf[:0], codec, lo, len(keys), keys[lo:hi], objs[lo:hi])
				ch <- result{data, hi - lo, err}
			})
		}
	}()
	fail := func(err error) error {
		close(stop)
		for range results {
		}
		wg.Wait()
		return err
	}
	var hdr []byte
	for ch := range results {
		r := <-ch
		if r.err != nil {
			return fail(r.err)
		}
		hdr = binary.AppendUvarint(hdr[:0], uint64(r.n))
		hdr = binary.AppendUvarint(hdr, uint64(len(r.data)))
		if _, err := out.Write(hdr); err != nil {
			return fail(err)
		}
		if _, err := out.Write(r.data); err != nil {
			return fail(err)
		}
		bufs.Put(r.data[:0]) // boxing the slice header costs little next to a chunk
	}
	wg.Wait()
	tail := append([]byte{0}, checkpointEnd...)
	tail = binary.BigEndian.AppendUint64(tail, uint64(len(keys)))
	if _, err := out.Write(tail); err != nil {
		return err
	}
	if _, err := bw.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return err
	}
	return bw.Flush()
}

// loaded is a decoded checkpoint's objects, chunk by chunk (in the order
// they were written), so that decoding in parallel needs no final copy,
// and the base an Indexer serves them from (the same pages).
type loaded[T any] struct {
	parts []*loadedPart[T]
	n     int
	base  *itemBase[T]
}

type loadedPart[T any] struct {
	itemPage[T]
	err error
}

// all yields every key and object.
func (l *loaded[T]) all(yield func(string, T) bool) {
	for _, p := range l.parts {
		for k, key := range p.keys {
			if !yield(key, p.objs[k]) {
				return
			}
		}
	}
}

type checkpointReader struct {
	r   *bufio.Reader
	crc hash.Hash32
}

func (c *checkpointReader) read(p []byte) error {
	if _, err := io.ReadFull(c.r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("truncated: %w", err)
	}
	c.crc.Write(p)
	return nil
}

func (c *checkpointReader) ReadByte() (byte, error) {
	x, err := c.r.ReadByte()
	if err == nil {
		c.crc.Write([]byte{x})
	}
	return x, err
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
	p := make([]byte, n)
	return p, c.read(p)
}

// arenaDecoder is implemented by codecs that decode in place and take
// their strings from an arena holding the encoding's bytes (Binary).
type arenaDecoder[T any] interface {
	decodeArena(d *binDecoder, data []byte, arena string, dst *T) error
}

// decodeChunk decodes one chunk's n records into p; base is the index of
// its first object. The keys, and the strings of objects a Binary codec
// decodes, share the chunk's bytes, which nothing writes once read: one
// allocation per chunk instead of two per object, which is most of what a
// warm start's decoding cost. A chunk lives while any of its strings does.
func decodeChunk[T any](p *loadedPart[T], codec Codec[T], data []byte, n, base int, total uint64) {
	p.keys, p.objs = make([]string, n), make([]T, n)
	into, _ := codec.(arenaDecoder[T])
	arena := unsafe.String(unsafe.SliceData(data), len(data))
	k := 0
	defer func() {
		if r := recover(); r != nil {
			p.err = fmt.Errorf("object %d of %d does not decode with the codec (codec panicked)", base+k+1, total)
		}
	}()
	d, od := binDecoder{buf: data}, &binDecoder{}
	// sub is the arena's copy of b, which ends where d has read to.
	sub := func(b []byte) string {
		end := len(data) - len(d.buf)
		return arena[end-len(b) : end]
	}
	for ; k < n; k++ {
		key, err := d.bytes()
		if err != nil {
			p.err = errors.New("corrupt: a record runs past its chunk")
			return
		}
		p.keys[k] = sub(key)
		enc, err := d.bytes()
		if err != nil {
			p.err = errors.New("corrupt: a record runs past its chunk")
			return
		}
		if into != nil {
			err = into.decodeArena(od, enc, sub(enc), &p.objs[k])
		} else {
			p.objs[k], err = codec.Decode(enc)
		}
		if err != nil {
			p.err = fmt.Errorf("object %d of %d does not decode with the codec (%T)", base+k+1, total, err)
			return
		}
	}
	if len(d.buf) != 0 {
		p.err = errors.New("corrupt: bytes after a chunk's records")
	}
}

// decodeCheckpoint reads a whole checkpoint, decoding its chunks on every
// CPU; it returns the checkpoint's version only when every byte checked
// out, so that a bad checkpoint is never half-loaded.
func decodeCheckpoint[T any](r io.Reader, codec Codec[T], name string) (ResourceVersion, *loaded[T], error) {
	c := &checkpointReader{r: bufio.NewReaderSize(r, 1<<16), crc: crc32.New(crcTable)}
	head := make([]byte, len(checkpointMagic)+2)
	if err := c.read(head); err != nil {
		return 0, nil, err
	}
	if string(head[:len(checkpointMagic)]) != checkpointMagic {
		return 0, nil, errors.New("not a dbinformer checkpoint (bad magic)")
	}
	if f := binary.BigEndian.Uint16(head[len(checkpointMagic):]); f != checkpointFormat {
		return 0, nil, fmt.Errorf("format version %d, this build reads version %d", f, checkpointFormat)
	}
	typ, err := c.bytes()
	if err != nil {
		return 0, nil, err
	}
	// A header that does not match is reported once the checksum has
	// shown that it is not corruption; the objects are then not decoded.
	var mismatch error
	if want := typeName[T](); string(typ) != want {
		mismatch = fmt.Errorf("it holds objects of type %s, this informer's are %s", typ, want)
	}
	who, err := c.bytes()
	if err != nil {
		return 0, nil, err
	}
	if string(who) != name && mismatch == nil {
		mismatch = fmt.Errorf("it was written by informer %q", who)
	}
	cn, err := c.bytes()
	if err != nil {
		return 0, nil, err
	}
	if want := codecName(codec); string(cn) != want && mismatch == nil {
		mismatch = fmt.Errorf("it was written with codec %s, this informer's is %s", cn, want)
	}
	fixed := make([]byte, 16)
	if err := c.read(fixed); err != nil {
		return 0, nil, err
	}
	rv, count := binary.BigEndian.Uint64(fixed), binary.BigEndian.Uint64(fixed[8:])

	type job struct {
		p       *loadedPart[T]
		data    []byte
		n, base int
	}
	jobs := make(chan job, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := range jobs {
				decodeChunk(j.p, codec, j.data, j.n, j.base, count)
			}
		})
	}
	out := &loaded[T]{}
	err = func() error {
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
			data := make([]byte, size)
			if err := c.read(data); err != nil {
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
	if err != nil {
		return 0, nil, err
	}
	end := make([]byte, len(checkpointEnd)+8)
	if err := c.read(end); err != nil {
		return 0, nil, err
	}
	if string(end[:len(checkpointEnd)]) != checkpointEnd || binary.BigEndian.Uint64(end[len(checkpointEnd):]) != count || uint64(out.n) != count {
		return 0, nil, errors.New("corrupt: bad end marker")
	}
	sum := c.crc.Sum32()
	tail := make([]byte, 4)
	if _, err := io.ReadFull(c.r, tail); err != nil {
		return 0, nil, fmt.Errorf("truncated: %w", io.ErrUnexpectedEOF)
	}
	if binary.BigEndian.Uint32(tail) != sum {
		return 0, nil, errors.New("corrupt: checksum mismatch")
	}
	if _, err := c.r.ReadByte(); err != io.EOF {
		return 0, nil, errors.New("corrupt: bytes after the end")
	}
	// A checksum failure says more than the codec: decode errors last.
	if mismatch != nil {
		return 0, nil, mismatch
	}
	pages := make([]itemPage[T], len(out.parts))
	for k, p := range out.parts {
		if p.err != nil {
			return 0, nil, p.err
		}
		pages[k] = p.itemPage
	}
	if out.base, err = newItemBase(pages, checkpointChunkBits); err != nil {
		return 0, nil, err
	}
	return ResourceVersion(rv), out, nil
}
