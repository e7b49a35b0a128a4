package relay

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// What message and keyMeta write, parse reads back; streams written with
// the separate headers of before are still read; a malformed header is
// refused naming the header and the field.
func TestWireRoundTrip(t *testing.T) {
	const prefix = "relay.w"
	key := KeySubject(prefix, "a.b")
	for _, tc := range []struct {
		name    string
		msg     *nats.Msg
		want    entry
		wantErr string
	}{
		{name: "progress", msg: message(prefix+".progress", 30, 20, 2, nil),
			want: entry{kind: kindProgress, version: 30, prev: 20, epoch: 2}},
		{name: "abort", msg: message(prefix+".abort.30", 30, 20, 2, nil),
			want: entry{kind: kindAbort, version: 30, prev: 20, epoch: 2}},
		{name: "put", msg: withData(message(key, 30, 20, 2, keyMeta(nil, opPut, 1, 3, false, false)), "x"),
			want: entry{kind: kindKey, key: "a.b", op: opPut, version: 30, prev: 20, epoch: 2, index: 1, count: 3, data: []byte("x")}},
		{name: "last of a relist", msg: message(key, 30, 20, 2, keyMeta(nil, opDel, 2, 3, true, true)),
			want: entry{kind: kindKey, key: "a.b", op: opDel, version: 30, prev: 20, epoch: 2, index: 2, count: 3, commit: true, relist: true}},
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
				e.commit != tc.want.commit || e.relist != tc.want.relist || string(e.data) != string(tc.want.data) || e.seq != 7 {
				t.Fatalf("parse: %+v, want %+v", e, tc.want)
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
