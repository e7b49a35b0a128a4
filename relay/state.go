package relay

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"

	"github.com/dbinformer/dbinformer/core/driver"
)

// termState is what one attempt of an election term tells the next.
type termState struct {
	wrote bool // a message of the term was stored
	// acked is the last source version the term's attempts acknowledged
	// (the pipeline acknowledges in order, and only what JetStream
	// stored): the source still holds every change after it, and the
	// stream every one up to it. 0: none yet.
	acked  uint64
	broken bool            // the last attempt's chain broke (see pipeline.brokenChain): the stream lacks a message of the term
	late   map[string]bool // the late writes' keys the term relists for, until its relist is stored (see carry)
	repair *repair         // the repair the term started, until an attempt finds it stored (see carry)
	at     uint64          // the version of the first message of the attempt that carried repair
}

// state is what the stream holds, as a term starts, and what the relay
// has sent since (the pipeline may not have them acknowledged yet: a
// failure ends the term, and the next one reads the stream again).
type state struct {
	epoch      uint64
	lastSeq    uint64              // the stream's last sequence after what was sent: the next publish expects it
	committed  uint64              // the last source version sent completely (progress included)
	top        uint64              // the highest version in the stream as read (a late write may end the stream below it)
	lastChange uint64              // the version of the last complete group of changes sent
	hashes     map[string][32]byte // key -> hash of its last put (absent: deleted or never)
	late       map[string]bool     // non-nil: the stream may lack a message (lateWrites); relist first, republishing these keys
	repair     *repair             // non-nil: the stream lacks a change the source still holds (lateLoss); repair it first
	puts       []entry             // the stream's puts as read, for the source's Restore; dropped once used
}

// read rebuilds the state from the stream; it reports the unfinished group
// at its end (version, keys) if any.
//
// wrote says that a message of this epoch was stored before (an earlier
// attempt of the same term): if the stream now ends with an earlier
// epoch's message, that one landed later. acked is the last source
// version the term acknowledged (termState.acked).
func (r *Relay[T]) read(ctx context.Context, epoch uint64, wrote bool, acked uint64) (*state, uint64, map[string]bool, error) {
	var entries []entry
	top, err := r.down.es.List(ctx, driver.ListSink[entry]{Emit: func(ev driver.Event[entry]) error {
		if ev.Err != nil {
			return fmt.Errorf("read the stream back: %w", ev.Err)
		}
		entries = append(entries, ev.Object)
		return nil
	}})
	if err != nil {
		return nil, 0, nil, err
	}
	st := &state{epoch: epoch, lastSeq: uint64(top), hashes: make(map[string][32]byte, len(entries))}
	var last entry
	var ours uint64 // the sequence of this term's first message the stream holds
	for _, e := range entries {
		if e.seq > last.seq {
			last = e
		}
		if e.epoch == epoch && (ours == 0 || e.seq < ours) {
			ours = e.seq
		}
		st.top = max(st.top, e.version)
		if e.kind == kindKey && e.op == opPut {
			st.hashes[e.key] = sha256.Sum256(e.data)
			st.puts = append(st.puts, e)
		}
	}
	for _, e := range entries {
		if e.kind == kindKey && e.shards != r.opts.Shards {
			return nil, 0, nil, driver.Permanent(fmt.Errorf("%s: the stream holds keys published %s (%q at sequence %d), this relay publishes %s: a stream holds one layout, or downstreams of one would miss the other's keys; to move, stop the relays, purge the stream (`nats stream purge %s`) and start them with the new setting: the first leader relists the source into it (downstreams relist from the stream)",
				r.source, layout(e.shards), e.key, e.seq, layout(r.opts.Shards), r.opts.Stream))
		}
	}
	// Any later epoch, not only the last message's: a deposed relay's
	// late messages may follow a later term's (see lateWrites).
	for _, e := range entries {
		if e.epoch > epoch {
			return nil, 0, nil, fmt.Errorf("%w (epoch %d at sequence %d, ours %d)", errDeposed, e.epoch, e.seq, epoch)
		}
	}
	st.committed, st.lastChange = last.committed(), last.lastChange()
	if late, keys, lateSeq := lateWrites(entries, last, wrote && last.epoch < epoch); late != "" {
		// A deposed relay's message landed after a later term's: it
		// was fenced by position only (see pipeline), so the message
		// before it may be missing. A relist republishes what is,
		// unless what is missing provably carried no change, or the
		// source still holds it (a repair, see repair).
		from, harmless, ok := lateLoss(entries)
		switch {
		case ok && harmless && last.commitPoint():
			r.log.Info("relay stream holds a late write of an earlier term that lost no change; resuming after it", "relay", r.source, "epoch", epoch, "late", late)
		case ok && from > 0 && last.commitPoint():
			r.log.Warn("relay stream holds a late write of an earlier term that lost a change; repairing it from the source", "relay", r.source, "epoch", epoch, "late", late, "from", from, "to", st.top)
			st.repair = &repair{from: from, to: st.top, keys: keys}
		case acked > 0 && ours > 0 && lateSeq > ours && last.commitPoint():
			// Every late write is behind a message of this term: it took
			// the place of one of this term's (a deposed leader's
			// pipelined publishes, sent when it was thawed, one of which
			// found the stream at the length it expected), so every
			// change the stream may lack is one this term sent and the
			// source was not acknowledged past (see termState.acked).
			r.log.Warn("relay stream holds a late write of an earlier term behind this term's messages; repairing from the source from the version this term acknowledged", "relay", r.source, "epoch", epoch, "late", late, "from", acked, "to", st.top)
			st.repair = &repair{from: acked, to: st.top, keys: keys}
		default:
			r.log.Warn("relay stream holds a late write of an earlier term; relisting", "relay", r.source, "epoch", epoch, "late", late)
			st.late = keys
		}
	}
	r.takeUp(st, entries)
	if last.seq == 0 || last.commitPoint() {
		return st, 0, nil, nil
	}
	// The stream ends inside a group or after an abort: a term died
	// before its relist was stored whole. Every group aborted so far
	// whose messages the stream still holds is republished too (see
	// abortedKeys), or a second failure in a row would leave downstreams
	// without those keys' changes.
	force := abortedKeys(entries)
	if last.kind == kindAbort {
		// A previous term aborted a group and died before relisting.
		return st, last.version, force, nil
	}
	// An unfinished group (a relay died while publishing it): its keys
	// are republished from a relist, after an abort message that tells
	// downstreams to drop what they hold of it.
	for _, e := range entries {
		if e.kind == kindKey && e.version == last.version && e.prev == last.prev {
			force[e.key] = true
		}
	}
	return st, last.version, force, nil
}

// abortedKeys returns the keys whose message in entries belongs to an
// aborted group: a key message stored before an abort message of its
// version. Downstreams dropped those changes with the group, but the
// stream still holds the messages and st.hashes was built from them, so
// a relist that compared the source with them would skip a key whose
// aborted put equals the source, or whose aborted delete the source
// agrees with, and the downstreams would keep the key's state from
// before the group. The term that aborts a group forces its keys in its
// relist, which supersedes every such message once stored; only a term
// that died before that leaves them. (Abort subjects are one per version,
// so every abort since the stream began is among entries; a key message
// of an earlier, complete group of the same version is forced too, which
// costs a republish and is otherwise harmless: forcing a key publishes
// the source's own state of it.)
func abortedKeys(entries []entry) map[string]bool {
	aborts := map[uint64]uint64{} // version -> sequence of its last abort message
	for _, e := range entries {
		if e.kind == kindAbort {
			aborts[e.version] = max(aborts[e.version], e.seq)
		}
	}
	keys := map[string]bool{}
	for _, e := range entries {
		if e.kind == kindKey && e.seq < aborts[e.version] {
			keys[e.key] = true
		}
	}
	return keys
}

// lateWrites finds the messages of an earlier epoch stored after one of
// a later epoch among entries (and last, when ours says so): a deposed
// relay's messages that landed after a later term had written. It
// describes the first, returns the keys of those that are key messages
// (a relist or repair republishes them even if unchanged, so that they
// are superseded and later terms do not find them again) and the lowest
// sequence among them.
func lateWrites(entries []entry, last entry, ours bool) (string, map[string]bool, uint64) {
	var first string
	var lowest uint64
	keys := map[string]bool{}
	note := func(e entry, what string) {
		if first == "" {
			first = what
		}
		if lowest == 0 || e.seq < lowest {
			lowest = e.seq
		}
		if e.kind == kindKey {
			keys[e.key] = true
		}
	}
	if ours {
		note(last, fmt.Sprintf("sequence %d of epoch %d, after this term's", last.seq, last.epoch))
	}
	bySeq := slices.SortedFunc(slices.Values(entries), func(a, b entry) int { return cmp.Compare(a.seq, b.seq) })
	var top entry
	for _, e := range bySeq {
		switch {
		case e.epoch < top.epoch:
			note(e, fmt.Sprintf("sequence %d of epoch %d, after sequence %d of epoch %d", e.seq, e.epoch, top.seq, top.epoch))
		case e.epoch > top.epoch:
			top = e
		}
	}
	return first, keys, lowest
}

// lateLoss examines the late writes among entries (see lateWrites). ok
// reports the one shape of them this package can reason about:
//
// A late write is the deposed term A's message stored at sequence s+1
// after the later term B's message at s: A's own message for s, expecting
// the stream to end at s-1 as B's did, was refused, and nothing else
// holds what it carried. The shape is: every late write is of one term A,
// a key or progress message, stored behind exactly one message of a later
// term (the intruder), with nothing of another term behind them; and the
// intruder is a progress message (that term's first) written from a read of the stream that
// ended at s-1 with A's message at a commit point (its version and prev
// are that message's committed and lastChange).
//
// In that shape, from (the intruder's version, the committed version of
// A's message at s-1) is a version no relay acknowledged the source past:
// A's pipeline acknowledges in order and stopped at its refused message,
// B's acknowledged its own intruder, and B's next message was refused in
// turn (A's late write took its sequence), its pipeline acknowledging
// nothing after a failure. Every change the stream may lack is after
// from, and at or before the stream's last version: the source, watched
// from from, still holds them all (see repair).
//
// harmless reports that the lost message provably carried no change, so
// that the stream, ending at a commit point after the late writes, holds
// every change up to its last version and a new term may resume from it:
// A's message at s+1 is in the stream, starts a group or is progress, and
// has the intruder's prev: A's last complete group of changes did not move
// across the lost message, which therefore completed no group and was no
// part of the group at s+1 (a key message at s would have been either the
// last of its group, moving prev, or not the last, making s+1 the same
// group's next).
//
// Anything else (several terms, a later term's message behind the late
// writes, which may have been stored after one of its own they refused)
// is not ok: the caller relists.
func lateLoss(entries []entry) (from uint64, harmless, ok bool) {
	bySeq := slices.SortedFunc(slices.Values(entries), func(a, b entry) int { return cmp.Compare(a.seq, b.seq) })
	at := make(map[uint64]entry, len(entries))
	var top entry
	var a, lastLate uint64 // the late writes' epoch, and the last's sequence
	for _, e := range bySeq {
		at[e.seq] = e
		switch {
		case e.epoch < top.epoch:
			if a != 0 && e.epoch != a {
				return 0, false, false
			}
			a, lastLate = e.epoch, e.seq
		case e.epoch > top.epoch:
			top = e
		}
	}
	if lastLate == 0 {
		return 0, false, false
	}
	var intruder entry
	harmless = true
	for _, e := range bySeq {
		switch {
		case intruder.seq != 0 && (e.epoch != a || (e.kind != kindKey && e.kind != kindProgress)):
			return 0, false, false
		case e.seq >= lastLate || e.epoch <= a:
			continue
		}
		intruder = e
		before, ok := at[e.seq-1]
		if !ok || before.epoch != a || !before.commitPoint() || e.kind != kindProgress ||
			e.version != before.committed() || e.prev != before.lastChange() {
			return 0, false, false
		}
		after, ok := at[e.seq+1]
		if !ok || after.epoch != a || (after.kind != kindProgress && (after.kind != kindKey || after.index != 0)) || after.prev != e.prev {
			harmless = false
		}
	}
	return intruder.version, harmless, intruder.seq != 0
}
