package core

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"runtime"
	"slices"
	"sync"

	codecs "github.com/dbinformer/dbinformer/core/codec"
)

// The checkpoint format, version 3: magic, format version (uint16), the
// object type, the checkpoint's name, the codec (its Go type, and its
// Schema when it has one, so that objects are never decoded by another
// codec or another layout), the version and the count of objects; then
// the objects in chunks, each a uvarint count of objects and a uvarint
// length in bytes followed by, per object, the key and the encoded object,
// each preceded by its length (uvarint); a chunk of zero objects ends
// them; every chunk but the last holds checkpointChunk objects, so that a
// loaded chunk is a page of the Indexer's base (itemtable.go) as it is.
// Then the objects written in a state later than the version (the cache
// moves on while a save reads it): a uvarint count, then per object its
// key (length-prefixed) and the uvarint version of its state, so that a
// warm start does not replay older changes onto it (replayFilter). Then
// the end magic, the count again and a CRC-32C of every byte before it.
// Fixed-size integers are big-endian. Chunks let a load decode objects on
// every CPU and a save encode them so. Version 2 (without the later
// states) is read as having none; version 1 (one run of objects, no
// codec) is refused: the informer lists instead.
const (
	checkpointMagic     = "DBINFCKP"
	checkpointEnd       = "DBINFEND"
	checkpointFormat    = 3
	checkpointFormatMin = 2 // the oldest format read
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
func codecName[T any](c codecs.Codec[T]) string {
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
func encodeChunk[T any](dst []byte, codec codecs.Codec[T], base, total int, keys []string, objs []T) (_ []byte, err error) {
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

// encodeCheckpoint writes the objects in keys/objs (at rv, those in later
// at the version it gives) to w, encoding chunks on every CPU.
func encodeCheckpoint[T any](w io.Writer, codec codecs.Codec[T], name string, rv ResourceVersion, keys []string, objs []T, later map[string]ResourceVersion) error {
	return encodeCheckpointOf(w, codec, name, rv, keys, func(lo int, keys []string, dst []T) error {
		copy(dst, objs[lo:lo+len(keys)])
		return nil
	}, func() (map[string]ResourceVersion, error) { return later, nil })
}

// encodeCheckpointOf writes the objects of keys (at rv) to w, encoding
// chunks on every CPU; get fills dst with the objects of keys, which start
// at keys[lo], a chunk at a time (a failure ends the write), so that no
// more than a few chunks of objects are held at once. later, called once
// every object is read, returns the objects read in a state later than rv
// and its version.
func encodeCheckpointOf[T any](w io.Writer, codec codecs.Codec[T], name string, rv ResourceVersion, keys []string, get func(lo int, keys []string, dst []T) error, later func() (map[string]ResourceVersion, error)) error {
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
	var bufs, objBufs sync.Pool
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
				objs, _ := objBufs.Get().([]T)
				if cap(objs) < hi-lo {
					objs = make([]T, checkpointChunk)
				}
				objs = objs[:hi-lo]
				var data []byte
				err := get(lo, keys[lo:hi], objs)
				if err == nil {
					data, err = encodeChunk(buf[:0], codec, lo, len(keys), keys[lo:hi], objs)
				}
				clear(objs)
				objBufs.Put(objs)
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
	lat, err := later()
	if err != nil {
		return err
	}
	tail := appendLater([]byte{0}, lat)
	tail = append(tail, checkpointEnd...)
	tail = binary.BigEndian.AppendUint64(tail, uint64(len(keys)))
	if _, err := out.Write(tail); err != nil {
		return err
	}
	if _, err := bw.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return err
	}
	return bw.Flush()
}

// appendLater appends the later states' section: sorted by key, so that
// the same cache writes the same bytes.
func appendLater(dst []byte, later map[string]ResourceVersion) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(later)))
	for _, k := range slices.Sorted(maps.Keys(later)) {
		dst = binary.AppendUvarint(dst, uint64(len(k)))
		dst = append(dst, k...)
		dst = binary.AppendUvarint(dst, uint64(later[k]))
	}
	return dst
}
