package relay

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// What message and keyMeta write, parse reads back; streams written with
// the separate headers of before are still read; a malformed header is
// refused naming the header and the field. A progress message may record
// a term's pending repair or relist in a header of its own, which leaves
// Dbi as it was (progress without it is read as before).
func TestWireRoundTrip(t *testing.T) {
	const prefix = "relay.w"
	key := KeySubject(prefix, "a.b")
	for _, tc := range []struct {
		name    string
		msg     *nats.Msg
		want    entry
		wantErr string
	}{
		{name: "term", msg: message(prefix+".term", 30, 20, 2, nil),
			want: entry{kind: kindProgress, version: 30, prev: 20, epoch: 2}},
		{name: "progress", msg: message(prefix+".progress", 30, 20, 2, nil),
			want: entry{kind: kindProgress, version: 30, prev: 20, epoch: 2}},
		{name: "abort", msg: message(prefix+".abort.30", 30, 20, 2, nil),
			want: entry{kind: kindAbort, version: 30, prev: 20, epoch: 2}},
		{name: "put", msg: withData(message(key, 30, 20, 2, keyMeta(nil, opPut, 1, 3, false, false)), "x"),
			want: entry{kind: kindKey, key: "a.b", op: opPut, version: 30, prev: 20, epoch: 2, index: 1, count: 3, data: []byte("x")}},
		{name: "last of a relist", msg: message(key, 30, 20, 2, keyMeta(nil, opDel, 2, 3, true, true)),
			want: entry{kind: kindKey, key: "a.b", op: opDel, version: 30, prev: 20, epoch: 2, index: 2, count: 3, commit: true, relist: true}},
		{name: "pending repair", msg: headers(prefix+".progress", map[string]string{hdrMeta: "30 20 2", hdrPending: "repair 12"}),
			want: entry{kind: kindProgress, version: 30, prev: 20, epoch: 2, pending: &pending{from: 12}}},
		{name: "pending relist", msg: headers(prefix+".progress", map[string]string{hdrMeta: "30 20 2", hdrPending: "relist"}),
			want: entry{kind: kindProgress, version: 30, prev: 20, epoch: 2, pending: &pending{relist: true}}},
		{name: "pending repair without a version", msg: headers(prefix+".progress", map[string]string{hdrMeta: "30 20 2", hdrPending: "repair"}), wantErr: `header Dbi-Pending="repair"`},
		{name: "pending something else", msg: headers(prefix+".progress", map[string]string{hdrMeta: "30 20 2", hdrPending: "repair 0"}), wantErr: `header Dbi-Pending="repair 0"`},
		{name: "no header", msg: nats.NewMsg(key), wantErr: "header Dbi is missing"},
		{name: "bad number", msg: headers(key, map[string]string{hdrMeta: "30 x 2 put 0 1"}), wantErr: `header Dbi="30 x 2 put 0 1": prev "x" is not a number`},
		{name: "short", msg: headers(key, map[string]string{hdrMeta: "30 20 2 put 0"}), wantErr: `count "" is not a number`},
		{name: "bad flag", msg: headers(key, map[string]string{hdrMeta: "30 20 2 put 0 1 done"}), wantErr: `unknown flag "done"`},
		{name: "progress with key fields", msg: headers(prefix+".progress", map[string]string{hdrMeta: "30 20 2 put 0 1"}), wantErr: `unexpected fields "put 0 1"`},
		{name: "bad op", msg: headers(key, map[string]string{hdrMeta: "30 20 2 upsert 0 1"}), wantErr: `unknown operation "upsert"`},
		{name: "index past count", msg: headers(key, map[string]string{hdrMeta: "30 20 2 put 1 1"}), wantErr: "index 1 is not below count 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := parse(prefix, tc.msg.Subject, 7, tc.msg.Header, tc.msg.Data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.msg.Subject) {
					t.Fatalf("parse: %v, want an error naming the subject and saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.seq = 7
			if e.kind != tc.want.kind || e.key != tc.want.key || e.op != tc.want.op || e.version != tc.want.version ||
				e.prev != tc.want.prev || e.epoch != tc.want.epoch || e.index != tc.want.index || e.count != tc.want.count ||
				e.commit != tc.want.commit || e.relist != tc.want.relist || string(e.data) != string(tc.want.data) || e.seq != 7 ||
				(e.pending == nil) != (tc.want.pending == nil) || (e.pending != nil && *e.pending != *tc.want.pending) {
				t.Fatalf("parse: %+v, want %+v", e, tc.want)
			}
		})
	}
}

// A term's first message records the repair it starts with (and
// acknowledges no further than the repair's version), or the relist;
// parse reads it back. An abort, and plain progress, record nothing.
func TestFirstRecordsPending(t *testing.T) {
	r := &Relay[int]{opts: Options[int]{Prefix: "relay.w"}}
	for _, tc := range []struct {
		name    string
		repair  *repair
		partial bool
		relist  bool
		want    *pending
		wantAck uint64
	}{
		{name: "resume", wantAck: 30},
		{name: "repair", repair: &repair{from: 12, to: 30}, want: &pending{from: 12}, wantAck: 12},
		{name: "relist", relist: true, want: &pending{relist: true}, wantAck: 30},
		{name: "abort", partial: true, relist: true, wantAck: 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &state{epoch: 2, committed: 30, lastChange: 20, repair: tc.repair}
			m, ack := r.first(st, 31, tc.partial, tc.relist)
			e, err := parse("relay.w", m.Subject, 7, m.Header, m.Data)
			if err != nil {
				t.Fatal(err)
			}
			wantKind := kindProgress
			if tc.partial {
				wantKind = kindAbort
			}
			if e.kind != wantKind || ack != tc.wantAck || (e.pending == nil) != (tc.want == nil) || (e.pending != nil && *e.pending != *tc.want) {
				t.Fatalf("first: %+v (pending %+v), acknowledging %d; want kind %d, pending %+v, acknowledging %d", e, e.pending, ack, wantKind, tc.want, tc.wantAck)
			}
		})
	}
}

func withData(m *nats.Msg, data string) *nats.Msg {
	m.Data = []byte(data)
	return m
}

func headers(subject string, h map[string]string) *nats.Msg {
	m := nats.NewMsg(subject)
	for k, v := range h {
		m.Header.Set(k, v)
	}
	return m
}
