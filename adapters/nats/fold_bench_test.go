package natsinformer

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
)

// benchItem is bench.item's shape: what bench.BenchmarkNATSKV decodes.
type benchItem struct {
	Name, Org, Team string
	N               int
}

// fakeMsg is a delivered KV message without a server.
type fakeMsg struct {
	jetstream.Msg
	subject string
	data    []byte
}

func (m *fakeMsg) Subject() string      { return m.subject }
func (m *fakeMsg) Data() []byte         { return m.data }
func (m *fakeMsg) Headers() nats.Header { return nil }

const foldKeys = 100_000

// foldInput is bench.BenchmarkNATSKV's bucket as messages: foldKeys
// values below "w.", one per key, at sequences 1..foldKeys.
func foldInput(b *testing.B) (*KV[benchItem], []jetstream.Msg) {
	msgs := make([]jetstream.Msg, foldKeys)
	for i := range msgs {
		k := fmt.Sprintf("namespace/object-%d", i)
		v, err := json.Marshal(benchItem{Name: k, Org: fmt.Sprintf("org-%d", i%100), Team: fmt.Sprintf("team-%d", i%1000), N: i})
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = &fakeMsg{subject: fmt.Sprintf("$KV.b.w.k%d", i), data: v}
	}
	return &KV[benchItem]{subject: "$KV.b.w.", codec: codec.JSON[benchItem]{}}, msgs
}

// BenchmarkFoldList is a 100k-key List's reader work without the
// network: each message folded, then the fold emitted. Compare with
// BenchmarkFoldDecodeOnly, the raw KV watcher's reader (decoding only).
func BenchmarkFoldList(b *testing.B) {
	k, msgs := foldInput(b)
	b.ResetTimer()
	for b.Loop() {
		fold := &kvFold[benchItem]{events: make([]driver.Event[benchItem], 0, len(msgs)), revs: make(map[string]uint64, len(msgs))}
		for i, m := range msgs {
			if err := k.foldMsg(fold, m, uint64(i+1), 1); err != nil {
				b.Fatal(err)
			}
		}
		n := 0
		if err := k.emitFold(fold, driver.ListSink[benchItem]{Emit: func(driver.Event[benchItem]) error { n++; return nil }}); err != nil {
			b.Fatal(err)
		}
		if n != len(msgs) {
			b.Fatalf("emitted %d", n)
		}
	}
}

// BenchmarkFoldWatch is a watch's reader work on 100k changes of keys it
// has not seen, in batches of 4096.
func BenchmarkFoldWatch(b *testing.B) {
	k, msgs := foldInput(b)
	var out []driver.Event[benchItem]
	b.ResetTimer()
	for b.Loop() {
		a := &kvApplier[benchItem]{kv: k, revs: make(map[string]uint64)}
		a.expect(uint64(len(msgs))) // as tail.open does
		for i := 0; i < len(msgs); i += 4096 {
			out = out[:0]
			for j := i; j < min(i+4096, len(msgs)); j++ {
				out = a.apply(msgs[j], uint64(j+1), out)
			}
			clear(out)
		}
	}
}

// BenchmarkFoldDecodeOnly decodes the same values and nothing else.
func BenchmarkFoldDecodeOnly(b *testing.B) {
	_, msgs := foldInput(b)
	b.ResetTimer()
	for b.Loop() {
		for _, m := range msgs {
			var it benchItem
			if err := json.Unmarshal(m.Data(), &it); err != nil {
				b.Fatal(err)
			}
		}
	}
}
