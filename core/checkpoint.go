package core

import (
	"bytes"
	"fmt"
	"time"

	"github.com/dbinformer/dbinformer/core/checkpoint"
	codecs "github.com/dbinformer/dbinformer/core/codec"
)

// CheckpointOptions makes an informer restart warm: it saves the cache and
// the version it is consistent at through Store, periodically and when a
// run ends, and a later run (in this process or the next) loads the last
// checkpoint, serves it at once (not yet synced, see
// SharedIndexInformer.ServingCheckpoint) and watches from its version
// instead of listing. When the source no longer holds that version
// (driver.ErrExpired: etcd compaction, a lost slot, a purged stream, 410 Gone), the
// informer relists and hands handlers only the differences against the
// loaded state: adds for new keys, updates for objects that changed
// (InformerOptions.Equal, by default equal encodings under Codec), deletes
// for vanished keys.
//
// What the source must keep for a warm start to be a watch rather than a
// relist: Postgres a permanent slot (see driver.DurableAcknowledger); etcd the
// revisions since the checkpoint, not yet compacted; NATS the stream's
// messages since the checkpoint (its retention); Kubernetes the
// apiserver's watch cache window (usually minutes).
type CheckpointOptions[T any] struct {
	// Store keeps the checkpoints. Required; checkpoint.NewDirStore is the
	// local-directory default.
	Store checkpoint.Store
	// Name names the checkpoint in Store; empty means the informer's Name.
	Name string
	// Codec encodes the cached objects. nil means the driver.ListerWatcher's own
	// (driver.CodecProvider); Run fails when it has none. A checkpoint records
	// the codec's type (and Binary's Schema): one written with another
	// codec is ignored, and the informer lists. Binary is the fastest for
	// plain structs.
	Codec codecs.Codec[T]
	// Interval is how often a checkpoint is saved while the informer runs
	// (only when the applied version moved); 0 means one minute, negative
	// means only when a run ends.
	Interval time.Duration
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

// codecEqual is the Equal a checkpointing informer uses by default, so
// that a relist after an expired checkpoint tells a changed object from
// an unchanged one: equal encodings.
func codecEqual[T any](codec codecs.Codec[T]) func(a, b T) bool {
	return func(a, b T) bool {
		x, err := codecs.Encode(codec, a)
		if err != nil {
			return false
		}
		y, err := codecs.Encode(codec, b)
		return err == nil && bytes.Equal(x, y)
	}
}
