package relay

import (
	"fmt"
	"maps"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/dbinformer/dbinformer/core/driver"
)

// repair mends, without a relist, a stream that lacks a change because a
// deposed term's message was refused and its next one stored behind a
// later term's (a late write: see lateLoss). The source, watched from
// from (a version no relay acknowledged it past), replays every change
// the stream may lack: all are after from and at or before to (the
// highest version the stream holds, state.top: a downstream may have
// confirmed any of them). The term collapses the replayed changes, up to
// and including the first version past to, into one group at that version
// with each key's last change (a delete for a key deleted since from),
// published as a relist's group is: its prev is the stream's last change,
// and a Downstream delivers it right after the last version it delivered,
// then a Bookmark at the group's version. A downstream that read the late
// writes (and confirmed to without the lost change) gets every key they
// and the lost change touched again, as of the group's version: never
// older than what it holds. Every late write's key is in the group, so
// the late writes are superseded and no later term finds them again.
//
// The group's version is past to, not to itself, so that it is a version
// the stream did not hold before: a Watch from to (a checkpoint taken
// after the late writes) starts at the first message past to, which is
// the repair; a group at to would look delivered to it and to every watch
// that confirmed to, and every reader of the stream (translator,
// catch-up, List, the shard views, the audit) would have to take a group
// at or below its version. The first version past to is the source's next
// change or Bookmark (a Postgres table bookmarks as its stream moves on;
// other sources when the relay asks for progress,
// Options.ProgressInterval).
//
// Until the group is stored the term acknowledges the source no further
// than from: its first message (progress at to, recording the repair:
// see pending) acknowledges from, and the changes replayed are
// acknowledged with the group.
//
// A relist whose source listed at the version the stream already ends at
// (an etcd prefix or the memory source list at their current revision,
// which does not move while nothing is written) is published the same
// way (listed): its group at that version would look delivered to a
// downstream that confirmed it, which would never get its changes.
type repair struct {
	from, to uint64
	broken   bool            // it mends a broken chain of this term's (see carry), not a late write
	keys     map[string]bool // the late writes' keys: the replay must hold a change of each
	changes  []change        // replayed so far, in source order
	listed   []change        // a relist's changes at from, before the replayed ones (nil: a repair of a late write)
	nListed  int             // for a relist: the keys it listed
}

// carry settles how the term mends late writes and broken chains, across
// its attempts, and returns whether it relists (relist: it must for
// another reason).
// The first message of an attempt supersedes the intruder (both are
// progress), so that the next attempt's read of the stream no longer
// shows the late writes: what the attempt was mending is carried in ts
// (the message records it too, for a term in another process: see
// takeUp; ts also keeps the late writes' keys of a relist).
// A repair is taken up again while the stream still ends where the
// attempt that started it found it (no more than that attempt's first
// message, progress at the same version, was stored), and dropped once
// the stream went past it (the repair's group was stored). The keys of a
// relist for late writes are carried until a relist is stored. A
// term that relists gives its repair up for the relist.
//
// A broken chain (the last attempt's message stored after one of its own
// that failed: the stream lacks that one, and no reading of the stream
// can tell) is repaired from the last version the term acknowledged: the
// pipeline acknowledges the source in order and stopped before the
// failed message, so the source holds every change the stream may lack.
// A term that acknowledged nothing yet, or relists anyway, relists.
func (st *state) carry(ts *termState, relist bool) bool {
	if st.repair == nil && ts.repair != nil && st.committed == ts.at {
		st.repair = &repair{from: ts.repair.from, to: max(ts.repair.to, st.top), keys: ts.repair.keys, broken: ts.repair.broken}
	}
	if ts.late != nil {
		st.relistFor(ts.late)
	}
	if ts.broken {
		ts.broken = false
		switch {
		case ts.acked == 0 || relist || st.late != nil:
			st.relistFor(nil)
		case st.repair == nil:
			st.repair = &repair{from: ts.acked, to: st.top, keys: map[string]bool{}, broken: true}
		default:
			st.repair.from = min(st.repair.from, ts.acked)
		}
	}
	relist = relist || st.late != nil
	if relist {
		st.dropRepair()
	}
	ts.repair, ts.late, ts.at = st.repair, st.late, st.committed
	return relist
}

// first returns the term's first message and the source version it
// acknowledges: an abort of the unfinished group at version partialV the
// stream ends with (partial), else progress at the stream's last version
// on the term subject (tokTerm), which records the repair or relist the
// term starts with (hdrPending), because it supersedes the trace of a
// late write that made the term mend it (the previous term's first
// message: see pending). A repair acknowledges no further than the
// version it replays the source from: the source must keep those changes.
func (r *Relay[T]) first(st *state, partialV uint64, partial, relist bool) (*nats.Msg, uint64) {
	if partial {
		return message(r.opts.Prefix+"."+tokAbort+"."+strconv.FormatUint(partialV, 10), partialV, st.lastChange, st.epoch, nil), st.committed
	}
	m := message(r.opts.Prefix+"."+tokTerm, st.committed, st.lastChange, st.epoch, nil)
	switch {
	case st.repair != nil:
		setPending(m, pending{from: st.repair.from})
		return m, st.repair.from
	case relist:
		setPending(m, pending{relist: true})
	}
	return m, st.committed
}

// takeUp carries on with what a term was mending when the stream holds
// that term's first message recording it (see pending) and nothing of
// the term, or of a later one, after it: the term ended before its
// repair or relist was stored, and its record is the only trace of the
// change the stream lacks (the message superseded the late write's
// evidence). The stream holds one message of the term subject, so one
// record at most. A repair is taken up from its version to the stream's last (the
// late writes are the stream's key messages past that version, as no
// term stored anything after them but the record and, maybe, more late
// writes). Late writes stored after the record (a deposed term's
// pipelined messages, the record their intruder: see lateLoss) are
// mended with it: a repair the read found for them starts from the
// record's version instead (what the record mends comes first), one it
// found harmless is the record's repair, and a relist for them
// republishes the record's keys too.
func (r *Relay[T]) takeUp(st *state, entries []entry) {
	var rec entry
	for _, e := range entries {
		if e.pending != nil {
			rec = e
		}
	}
	pd := rec.pending
	if pd == nil {
		return
	}
	for _, e := range entries {
		if e.seq > rec.seq && e.epoch >= rec.epoch {
			return // the term went on: its repair or relist was stored, or read finds it unfinished
		}
	}
	keys := map[string]bool{}
	for _, e := range entries {
		if e.kind == kindKey && !pd.relist && e.version > pd.from {
			keys[e.key] = true
		}
	}
	switch {
	case pd.relist:
		st.relistFor(nil)
		st.dropRepair()
		r.log.Warn("relay stream holds the first message of a term that ended before its relist was stored (a relist that mends a late write of an earlier term, or a broken chain); relisting", "relay", r.source, "epoch", rec.epoch, "sequence", rec.seq)
	case st.late != nil:
		st.relistFor(keys)
		r.log.Warn("relay stream holds the first message of a term that ended before its repair of a late write of an earlier term was stored, and later late writes; relisting", "relay", r.source, "epoch", rec.epoch, "sequence", rec.seq, "from", pd.from)
	case st.repair != nil:
		st.repair.from = min(st.repair.from, pd.from)
		if st.repair.keys == nil {
			st.repair.keys = map[string]bool{}
		}
		maps.Copy(st.repair.keys, keys)
		r.log.Warn("relay stream holds the first message of a term that ended before its repair of a late write of an earlier term was stored; repairing it with the late writes after it", "relay", r.source, "epoch", rec.epoch, "sequence", rec.seq, "from", st.repair.from, "to", st.repair.to)
	default:
		st.repair = &repair{from: pd.from, to: st.top, keys: keys}
		r.log.Warn("relay stream holds the first message of a term that ended before its repair of a late write of an earlier term was stored; repairing it from the source", "relay", r.source, "epoch", rec.epoch, "sequence", rec.seq, "from", pd.from, "to", st.top)
	}
}

// relistFor makes the term relist (state.late non-nil), republishing keys
// too, even where unchanged, so that the late writes among them are
// superseded.
func (st *state) relistFor(keys map[string]bool) {
	if st.late == nil {
		st.late = map[string]bool{}
	}
	maps.Copy(st.late, keys)
}

// dropRepair gives the repair up for a relist, which republishes its keys
// as it republishes every late write's (state.late).
func (st *state) dropRepair() {
	if st.repair == nil {
		return
	}
	st.relistFor(st.repair.keys)
	st.repair = nil
}

// expired logs that the source's watch expired, so that the term
// relists, and gives up a repair under way (see repair) for the relist.
func (r *Relay[T]) expired(st *state, err error) {
	if st.repair == nil || st.repair.listed != nil {
		r.log.Info("relay source expired; relisting", "relay", r.source, "from", st.committed, "err", err)
		st.repair = nil
		return
	}
	r.log.Warn("relay cannot repair a late write of an earlier term from the source (see err); relisting", "relay", r.source, "from", st.repair.from, "err", err)
	st.dropRepair()
}

// repairStep takes the source's changes at version v (none: a Bookmark)
// while the term repairs (st.repair): it keeps those after from and, at
// the first version past to, publishes the repair's group and waits until
// it is stored. A replay that lacks a late write's key did not start
// where the repair needs it to: that is driver.ErrExpired, and the term
// relists.
func (r *Relay[T]) repairStep(p *pipeline, st *state, v uint64, changes []change) error {
	rp := st.repair
	if v <= rp.from {
		if len(changes) > 0 {
			return fmt.Errorf("the source delivered a change of %q at version %d, not after version %d", changes[0].key, v, rp.from)
		}
		return nil
	}
	rp.changes = append(rp.changes, changes...)
	if v <= rp.to {
		return nil
	}
	seen := make(map[string]bool, len(rp.changes))
	for _, c := range rp.changes {
		seen[c.key] = true
	}
	for key := range rp.keys {
		if !seen[key] {
			return fmt.Errorf("%s: the source's changes from version %d to %d hold none of key %q, which a late write of an earlier term changed in them: %w", r.source, rp.from, v, key, driver.ErrExpired)
		}
	}
	msgs := r.group(st, v, rp.changes, true)
	if len(msgs) == 0 {
		msgs = []*nats.Msg{r.progress(st, v)}
	}
	if err := p.send(st, msgs, v); err != nil {
		return err
	}
	if len(rp.changes) > 0 {
		st.applied(v, rp.changes)
	} else {
		st.committed = v
	}
	st.repair = nil
	if err := p.sync(); err != nil {
		return err
	}
	if rp.listed != nil {
		r.relists.Add(1)
		r.opts.Metrics.Relisted(len(msgs), rp.nListed)
		r.log.Info("relay published a relist of the source", "relay", r.source, "version", v, "listed_at", rp.from, "changed", len(msgs), "listed", rp.nListed)
		return nil
	}
	r.repairs.Add(1)
	if rp.broken {
		r.log.Info("relay repaired a broken chain from the source (no relist)", "relay", r.source, "from", rp.from, "to", rp.to, "version", v, "keys", len(seen))
		return nil
	}
	r.log.Info("relay repaired a late write of an earlier term from the source (no relist)", "relay", r.source, "from", rp.from, "late", rp.to, "version", v, "keys", len(seen))
	return nil
}
