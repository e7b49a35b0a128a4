package informertest

import (
	"context"
	"iter"

	"github.com/dbinformer/dbinformer/core"
)

// Checkpoints (core.CheckpointOptions) ask the ListerWatcher for more than
// List and Watch; a Spy forwards each to what it wraps, and behaves as a
// source without it when the wrapped ListerWatcher does not implement it.

var (
	_ core.Restorer[int]       = (*Spy[int])(nil)
	_ core.DurableAcknowledger = (*Spy[int])(nil)
	_ core.CodecProvider[int]  = (*Spy[int])(nil)
)

// Restore forwards to the wrapped core.Restorer; without one it returns nil
// (a source whose watches need no parked state).
func (s *Spy[T]) Restore(ctx context.Context, rv core.ResourceVersion, objects iter.Seq2[string, T]) error {
	if r, ok := s.lw.(core.Restorer[T]); ok {
		return r.Restore(ctx, rv, objects)
	}
	return nil
}

// GateAcknowledgements forwards to the wrapped core.DurableAcknowledger.
func (s *Spy[T]) GateAcknowledgements(gated bool) {
	if a, ok := s.lw.(core.DurableAcknowledger); ok {
		a.GateAcknowledgements(gated)
	}
}

// AcknowledgeDurable forwards to the wrapped core.DurableAcknowledger.
func (s *Spy[T]) AcknowledgeDurable(rv core.ResourceVersion) {
	if a, ok := s.lw.(core.DurableAcknowledger); ok {
		a.AcknowledgeDurable(rv)
	}
}

// Codec forwards to the wrapped core.CodecProvider; nil without one.
func (s *Spy[T]) Codec() core.Codec[T] {
	if p, ok := s.lw.(core.CodecProvider[T]); ok {
		return p.Codec()
	}
	return nil
}
