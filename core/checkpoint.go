package core

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"iter"
	"time"
)

// CheckpointOptions makes an informer restart warm: it saves the cache and
// the version it is consistent at through Store, periodically and when a
// run ends, and a later run (in this process or the next) loads the last
// checkpoint, serves it at once (not yet synced, see
// SharedIndexInformer.ServingCheckpoint) and watches from its version
// instead of listing. When the source no longer holds that version
// (ErrExpired: etcd compaction, a lost slot, a purged stream, 410 Gone), the
// informer relists and hands handlers only the differences against the
// loaded state: adds for new keys, updates for objects that changed
// (InformerOptions.Equal, by default equal encodings under Codec), deletes
// for vanished keys.
//
// What the source must keep for a warm start to be a watch rather than a
// relist: Postgres a permanent slot (see DurableAcknowledger); etcd the
// revisions since the checkpoint, not yet compacted; NATS the stream's
// messages since the checkpoint (its retention); Kubernetes the
// apiserver's watch cache window (usually minutes).
type CheckpointOptions[T any] struct {
	// Store keeps the checkpoints. Required; NewDirCheckpointStore is the
	// local-directory default.
	Store CheckpointStore
	// Name names the checkpoint in Store; empty means the informer's Name.
	Name string
	// Codec encodes the cached objects. nil means the ListerWatcher's own
	// (CodecProvider); Run fails when it has none.
	Codec Codec[T]
	// Interval is how often a checkpoint is saved while the informer runs
	// (only when the applied version moved); 0 means one minute, negative
	// means only when a run ends.
	Interval time.Duration
}

// CodecProvider is implemented by a ListerWatcher that can say which Codec
// turns its objects into bytes and back; a checkpoint uses it when
// CheckpointOptions.Codec is nil.
type CodecProvider[T any] interface {
	Codec() Codec[T]
}

// Restorer is implemented by a ListerWatcher that parks state between
// watches (see "State parked between watches" in the contract) and can
// rebuild it from the objects of a checkpoint. A warm start calls Restore
// with the loaded objects before Watch(from rv); the adapter parks what it
// needs at exactly rv. An error makes the informer relist (reporting the
// error), with the loaded objects still served meanwhile. A ListerWatcher
// whose Watch(from) needs no parked state (etcd, Kubernetes, NATS, which
// rebuild it from the source) does not implement it.
type Restorer[T any] interface {
	Restore(ctx context.Context, rv ResourceVersion, objects iter.Seq2[string, T]) error
}

// DurableAcknowledger is implemented by a ListerWatcher that acknowledges
// positions to its server so that the server may discard what comes before
// (the Postgres slot's confirmed flush). With checkpoints on, a position
// acknowledged past the last durable checkpoint would lose, after a crash,
// the changes the next warm start needs. The informer calls
// GateAcknowledgements(true) before its first list or watch, and
// AcknowledgeDurable(rv) after each checkpoint at rv is durable; the
// adapter then acknowledges no position past the last such rv.
type DurableAcknowledger interface {
	GateAcknowledgements(gated bool)
	AcknowledgeDurable(rv ResourceVersion)
}

// CheckpointError reports a checkpoint that could not be saved, or a
// loaded one that is unusable (corrupt, truncated, of another informer or
// object type, of another format version) and was therefore ignored: the
// informer lists instead. It never holds the checkpoint's content.
type CheckpointError struct {
	Name string // the checkpoint's name
	Op   string // "save" or "load"
	Err  error
}

func (e *CheckpointError) Error() string {
	if e.Op == "load" {
		return fmt.Sprintf("dbinformer: checkpoint %q is unusable and was ignored (the informer lists instead): %v", e.Name, e.Err)
	}
	return fmt.Sprintf("dbinformer: checkpoint %q: %s: %v", e.Name, e.Op, e.Err)
}

func (e *CheckpointError) Unwrap() error { return e.Err }

// The checkpoint format, version 1: magic, format version (uint16), the
// object type, the checkpoint's name, the version and the count of
// objects; then per object the key and the encoded object, each preceded
// by its length (uvarint); then the end magic, the count again and a
// CRC-32C of every byte before it. Integers are big-endian.
const (
	checkpointMagic   = "DBINFCKP"
	checkpointEnd     = "DBINFEND"
	checkpointFormat  = 1
	checkpointMaxItem = 1 << 30
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// typeName names T in a checkpoint, so that a checkpoint of another type is
// refused rather than decoded into the wrong one.
func typeName[T any]() string { return fmt.Sprintf("%T", *new(T)) }

type checkpointWriter struct {
	w   *bufio.Writer
	crc hash.Hash32
	buf [binary.MaxVarintLen64]byte
}

func (c *checkpointWriter) write(p []byte) error {
	c.crc.Write(p)
	_, err := c.w.Write(p)
	return err
}

func (c *checkpointWriter) uvarint(n uint64) error {
	return c.write(binary.AppendUvarint(c.buf[:0], n))
}

func (c *checkpointWriter) bytes(p []byte) error {
	if err := c.uvarint(uint64(len(p))); err != nil {
		return err
	}
	return c.write(p)
}

// encodeCheckpoint writes the objects in keys/objs (at rv) to w.
func encodeCheckpoint[T any](w io.Writer, codec Codec[T], name string, rv ResourceVersion, keys []string, objs []T) error {
	c := &checkpointWriter{w: bufio.NewWriterSize(w, 1<<16), crc: crc32.New(crcTable)}
	head := append([]byte(checkpointMagic), 0, 0)
	binary.BigEndian.PutUint16(head[len(checkpointMagic):], checkpointFormat)
	if err := c.write(head); err != nil {
		return err
	}
	c.bytes([]byte(typeName[T]()))
	c.bytes([]byte(name))
	c.write(binary.BigEndian.AppendUint64(nil, uint64(rv)))
	if err := c.write(binary.BigEndian.AppendUint64(nil, uint64(len(keys)))); err != nil {
		return err
	}
	for n, key := range keys {
		data, err := Encode(codec, objs[n])
		if err != nil {
			// The codec's message may quote the object: name only its type.
			return fmt.Errorf("object %d of %d does not encode with the codec (%T)", n+1, len(keys), err)
		}
		if err := c.bytes([]byte(key)); err != nil {
			return err
		}
		if err := c.bytes(data); err != nil {
			return err
		}
	}
	c.write([]byte(checkpointEnd))
	c.write(binary.BigEndian.AppendUint64(nil, uint64(len(keys))))
	if _, err := c.w.Write(binary.BigEndian.AppendUint32(nil, c.crc.Sum32())); err != nil {
		return err
	}
	return c.w.Flush()
}

type checkpointReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	buf []byte
}

func (c *checkpointReader) read(n int) ([]byte, error) {
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	p := c.buf[:n]
	if _, err := io.ReadFull(c.r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("truncated: %w", err)
	}
	c.crc.Write(p)
	return p, nil
}

func (c *checkpointReader) uint64() (uint64, error) {
	p, err := c.read(8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(p), nil
}

func (c *checkpointReader) bytes() ([]byte, error) {
	n, err := binary.ReadUvarint(byteCounter{c})
	if err != nil {
		return nil, fmt.Errorf("truncated or corrupt length: %w", err)
	}
	if n > checkpointMaxItem {
		return nil, fmt.Errorf("corrupt: a length of %d bytes", n)
	}
	return c.read(int(n))
}

// byteCounter reads single bytes through the checksum.
type byteCounter struct{ c *checkpointReader }

func (b byteCounter) ReadByte() (byte, error) {
	x, err := b.c.r.ReadByte()
	if err == nil {
		b.c.crc.Write([]byte{x})
	}
	return x, err
}

// decodeCheckpoint reads a whole checkpoint into deltas; it returns the
// checkpoint's version only when every byte checked out, so that a bad
// checkpoint is never half-loaded.
func decodeCheckpoint[T any](r io.Reader, codec Codec[T], name string) (ResourceVersion, []Delta[T], error) {
	c := &checkpointReader{r: bufio.NewReaderSize(r, 1<<16), crc: crc32.New(crcTable)}
	head, err := c.read(len(checkpointMagic) + 2)
	if err != nil {
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
	if want := typeName[T](); string(typ) != want {
		return 0, nil, fmt.Errorf("it holds objects of type %s, this informer's are %s", typ, want)
	}
	who, err := c.bytes()
	if err != nil {
		return 0, nil, err
	}
	if string(who) != name {
		return 0, nil, fmt.Errorf("it was written by informer %q", who)
	}
	rv, err := c.uint64()
	if err != nil {
		return 0, nil, err
	}
	count, err := c.uint64()
	if err != nil {
		return 0, nil, err
	}
	deltas := make([]Delta[T], 0, min(count, 1<<20))
	var decodeErr error
	for n := uint64(0); n < count; n++ {
		key, err := c.bytes()
		if err != nil {
			return 0, nil, err
		}
		k := string(key)
		data, err := c.bytes()
		if err != nil {
			return 0, nil, err
		}
		obj, err := Decode(codec, data)
		if err != nil && decodeErr == nil {
			// Keep reading: a checksum failure says more than the codec.
			decodeErr = fmt.Errorf("object %d of %d does not decode with the codec (%T)", n+1, count, err)
		}
		deltas = append(deltas, Delta[T]{Type: DeltaReplaced, Key: k, Object: obj, HasObject: true})
	}
	end, err := c.read(len(checkpointEnd) + 8)
	if err != nil {
		return 0, nil, err
	}
	if string(end[:len(checkpointEnd)]) != checkpointEnd || binary.BigEndian.Uint64(end[len(checkpointEnd):]) != count {
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
	if decodeErr != nil {
		return 0, nil, decodeErr
	}
	return ResourceVersion(rv), deltas, nil
}

// codecEqual is the Equal a checkpointing informer uses by default, so
// that a relist after an expired checkpoint tells a changed object from
// an unchanged one: equal encodings.
func codecEqual[T any](codec Codec[T]) func(a, b T) bool {
	return func(a, b T) bool {
		x, err := Encode(codec, a)
		if err != nil {
			return false
		}
		y, err := Encode(codec, b)
		return err == nil && bytes.Equal(x, y)
	}
}
