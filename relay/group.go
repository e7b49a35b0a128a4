package relay

import (
	"crypto/sha256"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
)

// What the relay publishes for the source's changes: a change per key, the
// messages of one group of them at a version, and the state they leave.
// Moved out of relay.go, whose relist and watch build them.

// change is one key's change in a group.
type change struct {
	key  string
	op   string
	data []byte
	err  string
}

// change turns a source event into a change.
func (r *Relay[T]) change(ev driver.Event[T]) change {
	c := change{key: ev.Key}
	switch {
	case ev.Err != nil:
		c.op, c.err = opErr, ev.Err.Error()
	case ev.Type == driver.Deleted:
		c.op = opDel
	default:
		data, err := codec.Encode(r.opts.Codec, ev.Object)
		if err != nil {
			c.op, c.err = opErr, fmt.Sprintf("relay: encode: %v", err)
		} else {
			c.op, c.data = opPut, data
		}
	}
	return c
}

// progress is the message that publishes the source's head, version v,
// when it has no change of its own there.
func (r *Relay[T]) progress(st *state, v uint64) *nats.Msg {
	return message(r.opts.Prefix+"."+tokProgress, v, st.lastChange, st.epoch, nil)
}

// group builds the messages of one group of changes at version v, the last
// change of each key only (a message per key: the stream keeps one per
// subject, and an earlier one of the same group would be removed).
func (r *Relay[T]) group(st *state, v uint64, changes []change, relist bool) []*nats.Msg {
	last := make(map[string]int, len(changes))
	for i, c := range changes {
		last[c.key] = i
	}
	n := len(last)
	msgs := make([]*nats.Msg, 0, n)
	var kb [48]byte
	for i, c := range changes {
		if last[c.key] != i {
			continue
		}
		tok := encodeKey(c.key)
		idx := len(msgs)
		m := message(r.subject(c.key, tok), v, st.lastChange, st.epoch, keyMeta(kb[:0], c.op, idx, n, idx == n-1, relist))
		// (version, position, key, term): a retry of the same publish is
		// stored once; the term keeps a later term's republish of a version
		// (after an aborted group) from being taken for a duplicate, which
		// publish also refuses to accept silently.
		m.Header[jetstream.MsgIDHeader] = []string{strconv.FormatUint(v, 10) + "-" + strconv.Itoa(idx) + "-" + tok + "-" + strconv.FormatUint(st.epoch, 10)}
		switch c.op {
		case opPut:
			m.Data = c.data
		case opErr:
			m.Header[hdrError] = []string{c.err}
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// applied records a published group in the state.
func (st *state) applied(v uint64, changes []change) {
	for _, c := range changes {
		if c.op == opPut {
			st.hashes[c.key] = sha256.Sum256(c.data)
		} else {
			delete(st.hashes, c.key)
		}
	}
	st.committed, st.lastChange = v, v
}
