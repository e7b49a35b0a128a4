package relay

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
)

// restore hands a source that parks state between watches (driver.Restorer:
// a Postgres table over a permanent slot) the stream's keys at the last
// version it holds completely, so that a new leader — a process that
// never listed the source — resumes the source's watch from there instead
// of relisting it (a relist of a Postgres table is a temporary slot and a
// COPY of the table; the permanent slot still holds every change since,
// the relay acknowledging to it only what the stream stored). It reports
// whether the term must relist: the source answered that the changes are
// gone (driver.ErrExpired: the slot was dropped or moved past the version),
// which is logged with the source's reason. A term that repairs a late
// write (state.repair) resumes the source from the version the repair
// replays from instead.
func (r *Relay[T]) restore(ctx context.Context, st *state) (relist bool, err error) {
	rs, ok := driver.Capability[driver.Restorer[T]](r.src)
	from := st.committed
	if st.repair != nil {
		// The source resumes from the version the repair replays from
		// (the stream's keys are as of a later one: a Postgres table
		// does not read them).
		from = st.repair.from
	}
	if !ok || from == 0 {
		return false, nil
	}
	puts := st.puts
	objects := func(yield func(string, T) bool) {
		for _, e := range puts {
			obj, err := codec.Decode(r.opts.Codec, e.data)
			if err != nil {
				// A key the relay could not decode was published as
				// such; the source's Restore gets the others.
				r.log.Warn("relay stream holds an object the codec cannot decode; restoring without it", "relay", r.source, "key", e.key, "err", err)
				continue
			}
			if !yield(e.key, obj) {
				return
			}
		}
	}
	var seq iter.Seq2[string, T] = objects
	err = rs.Restore(ctx, core.ResourceVersion(from), seq)
	switch {
	case err == nil && st.repair != nil:
		r.log.Info("relay resumes the source from the version before the late write's lost change, to repair it", "relay", r.source, "version", from, "keys", len(puts))
		return false, nil
	case err == nil:
		r.log.Info("relay resumes the source from the stream's last version", "relay", r.source, "version", from, "keys", len(puts))
		return false, nil
	case errors.Is(err, driver.ErrExpired) && st.repair != nil:
		r.expired(st, err)
		return true, nil
	case errors.Is(err, driver.ErrExpired):
		r.log.Warn("relay cannot resume the source from the stream's last version (the source no longer holds the changes since); relisting", "relay", r.source, "version", from, "err", err)
		return true, nil
	default:
		return false, fmt.Errorf("resume the source at version %d: %w", from, err)
	}
}

// slotTaker is a source whose server-side reader another process may
// still hold (pginformer's Table and Source: the permanent slot's
// walsender of a deposed leader that froze).
type slotTaker interface {
	TakeOverSlot(ctx context.Context) error
}

// takeOver has the source end another process's hold on it, once the
// term's first message is stored: from then on the deposed leader's
// publishes fail (each expects the stream to end where it left it), so
// taking the slot from it loses nothing. Without this, the new leader's
// stream waits for the server to time the old walsender out.
func (r *Relay[T]) takeOver(p *pipeline) error {
	tk, ok := driver.Capability[slotTaker](r.src)
	if !ok {
		return nil
	}
	if err := p.sync(); err != nil {
		return err
	}
	if err := tk.TakeOverSlot(p.ctx); err != nil {
		return fmt.Errorf("take the source over from the previous leader: %w", err)
	}
	return nil
}
