package pginformer

import (
	"context"
	"fmt"
	"iter"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
)

// Warm restarts (core.CheckpointOptions). A Table is a driver.Restorer: an
// informer that starts from a checkpoint hands it the checkpoint's keys,
// and the table watches from the checkpoint's version over the permanent
// slot, without reading a row. It is a driver.DurableAcknowledger: with
// checkpoints on, the slot's confirmed position never passes the last
// durable checkpoint of any gated table, so the server keeps every change a
// warm start needs.

var (
	_ driver.Restorer[map[string]any]      = (*Table[map[string]any])(nil)
	_ driver.DurableAcknowledger           = (*Table[map[string]any])(nil)
	_ driver.CodecProvider[map[string]any] = (*Table[map[string]any])(nil)
)

// Codec implements driver.CodecProvider: checkpoints of a struct T encode
// it with codec.Binary when T's fields allow it (pgtype values, time.Time,
// slices and pointers of plain types do; a map or interface field, such as
// a jsonb column decoded into map[string]any, does not), else as JSON (its
// fields must round-trip through encoding/json, as the pgtype types do).
// Binary decodes a checkpoint many times faster than JSON, which makes a
// warm start's load cost a fraction of a list's. For map[string]any rows it
// returns nil, and an informer with checkpoints asks for a codec: JSON
// would bring numbers back as float64, not as the types the table decodes.
//
// The codec's Schema, which a checkpoint's header carries, names the
// table's shape as NewTable proved it (relation id, the decoded columns'
// names, types and type modifiers): a warm start over a table whose
// schema changed since the checkpoint (a column retyped, dropped, the
// table re-created) finds another shape, ignores the checkpoint (the
// informer reports a core.CheckpointError naming both) and lists the
// table, instead of restoring a cache of another shape.
func (t *Table[T]) Codec() codec.Codec[T] {
	if t.m.typ == nil {
		return nil
	}
	t.codecOnce.Do(func() {
		shape, _, _ := t.src.fan.schemaState(&t.st.feed)
		if b, err := codec.NewBinary[T](); err == nil {
			t.codec = &binaryTableCodec[T]{Binary: b, shape: shape.fingerprint()}
		} else {
			t.codec = &jsonTableCodec[T]{shape: shape.fingerprint()}
		}
	})
	return t.codec
}

// binaryTableCodec is codec.Binary (its optional fast paths promoted) with
// the table's shape in its Schema.
type binaryTableCodec[T any] struct {
	*codec.Binary[T]
	shape string
}

func (c *binaryTableCodec[T]) Schema() string { return c.Binary.Schema() + "; " + c.shape }

// jsonTableCodec is codec.JSON with the table's shape in its Schema.
type jsonTableCodec[T any] struct {
	codec.JSON[T]
	shape string
}

func (c *jsonTableCodec[T]) Schema() string { return "json; " + c.shape }

// GateAcknowledgements implements driver.DurableAcknowledger: while gated,
// the slot's confirmed position stays at or below the version last passed
// to AcknowledgeDurable.
func (t *Table[T]) GateAcknowledgements(gated bool) {
	t.src.fan.gate(&t.st.feed, gated)
}

// AcknowledgeDurable implements driver.DurableAcknowledger.
func (t *Table[T]) AcknowledgeDurable(rv core.ResourceVersion) {
	t.src.fan.acknowledgeDurable(&t.st.feed, rv)
}

// Restore implements driver.Restorer: it makes the table watchable from rv,
// the version of a checkpoint holding keys, in a process that never listed
// it. It needs Options.PermanentSlot, a slot whose confirmed position is
// at or below rv (acknowledgements gated by checkpoints). Under REPLICA
// IDENTITY DEFAULT pgoutput leaves an unchanged TOASTed value out of an
// update; a restored table does not know it and has the consumer fill it
// in from the object it caches for the key (driver.Event.Fill, fillin.go),
// so any table with a primary key restores, whatever its columns. Only a
// Table with a filter (which must see whole rows) still needs REPLICA
// IDENTITY FULL or no variable-length column beside the key. Otherwise
// it returns an error matching driver.ErrExpired and the informer relists,
// handing its handlers only the differences.
func (t *Table[T]) Restore(ctx context.Context, rv core.ResourceVersion, objects iter.Seq2[string, T]) error {
	s, st := t.src, t.st
	if s.fan.isActive(&st.feed) {
		// This process keeps the table's state: Watch(from) decides.
		return nil
	}
	if !s.opts.PermanentSlot {
		return fmt.Errorf("postgres %s: table %s: a warm start needs Options.PermanentSlot (a temporary slot ended with the process that made it): %w", s.where(), st.ident.Sanitize(), driver.ErrExpired)
	}
	if !st.full && t.filter != nil {
		if err := t.checkRestorable(ctx); err != nil {
			return err
		}
	}
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	sess, err := s.openSession(ctx)
	if err != nil {
		return err
	}
	if s.fan.isActive(&st.feed) {
		return nil
	}
	if sess.snap != nil {
		return fmt.Errorf("postgres %s: replication slot %q was created anew: the changes since the checkpoint at %s are not in it: %w", s.where(), s.slot, lsn(rv), driver.ErrExpired)
	}
	st.knownMu.Lock()
	defer st.knownMu.Unlock()
	if err := s.fan.restore(&st.feed, rv); err != nil {
		return err
	}
	st.resetKnown()
	s.log.Info("table restored from a checkpoint", "table", st.ident.Sanitize(), "rv", lsn(rv))
	s.streamEarly(ctx, sess)
	return nil
}

// streamEarly starts the resumed slot's stream as soon as the last
// checkpointing table of the Source has restored, instead of at the first
// Watch: an informer calls Restore as soon as its checkpoint's header is
// read, while it reads and decodes the objects, so that the stream's start,
// the server's keepalive with its WAL end and the catalog checks that
// vouch for it (guard.go) overlap the decoding, and the first watch finds
// the head reached (a warm start's catch-up) instead of waiting for them.
// The stream keeps the restored table's transactions until its watch
// comes (they are not acknowledged before), as after a List. It waits,
// like ensureStreaming, for every other checkpointing table to restore or
// list: a stream running past another table's checkpoint would make its
// Restore fail. A stream that fails to start here is started again by
// the first Watch (ensureStreaming resumes it). Called with setupMu held.
func (s *Source) streamEarly(ctx context.Context, sess *session) {
	if waiting, _ := s.fan.awaitingRestore(); waiting {
		return
	}
	s.mu.Lock()
	current := s.sess == sess && !s.closed && sess.resumed && !sess.streaming
	s.mu.Unlock()
	if !current {
		return
	}
	// The stream's first status update asks for a keepalive: its WAL
	// end moves the stream's position up to the server's head at once.
	s.fan.probe()
	if err := s.startStream(ctx, sess); err != nil {
		s.log.Debug("start the stream after restoring (the first watch starts it again)", "err", err)
	}
}

// checkRestorable refuses a filtered REPLICA IDENTITY DEFAULT table with
// a variable-length column outside the primary key (see Restore). It
// reads the catalog only.
func (t *Table[T]) checkRestorable(ctx context.Context) error {
	s, st := t.src, t.st
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer s.release(conn)
	cols, err := columns(ctx, conn, st.oid)
	if err != nil {
		return s.wrap("read the table's columns", err)
	}
	pk := map[string]bool{}
	for _, k := range st.pk {
		pk[k] = true
	}
	for _, c := range cols {
		if c.generated || pk[c.name] || t.m.omit[c.name] || fixedLength[c.base] {
			continue
		}
		return fmt.Errorf("postgres %s: table %s: column %q (%s) may hold TOASTed values, which a filtered table cannot fill in after restoring from a checkpoint under REPLICA IDENTITY DEFAULT (the filter needs the whole row); for warm restarts set ALTER TABLE %s REPLICA IDENTITY FULL (or omit the column): %w",
			s.where(), st.ident.Sanitize(), c.name, c.typname, st.ident.Sanitize(), driver.ErrExpired)
	}
	return nil
}
