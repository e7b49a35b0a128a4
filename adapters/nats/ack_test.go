package natsinformer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/integration/harness"
)

// parseAck reads what nats.go's Msg.Metadata reads, on messages a real
// server delivered (its ack subjects in the form it uses now).
func TestParseAckMatchesMetadata(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ACKS", Subjects: []string{"acks.>"}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 25
	for i := range n {
		if _, err := js.Publish(ctx, fmt.Sprintf("acks.%d", i%4), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy, FilterSubject: "acks.>"})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		want, err := m.Metadata()
		if err != nil {
			t.Fatalf("Metadata of %q: %v", m.Reply(), err)
		}
		a, err := parseAck(m.Reply())
		if err != nil {
			t.Fatalf("parseAck(%q): %v", m.Reply(), err)
		}
		if a.sseq != want.Sequence.Stream || a.cseq != want.Sequence.Consumer || a.pending != want.NumPending {
			t.Errorf("parseAck(%q) = %+v, Metadata says stream %d consumer %d pending %d", m.Reply(), a, want.Sequence.Stream, want.Sequence.Consumer, want.NumPending)
		}
		got++
	}
	if err := batch.Error(); err != nil {
		t.Fatal(err)
	}
	if got != 4 {
		t.Fatalf("fetched %d messages, want the last of each of 4 subjects", got)
	}
}

// The ack subject forms nats.go's parser accepts (jetstream/internal/parser)
// and some it refuses.
func TestParseAckForms(t *testing.T) {
	for _, c := range []struct {
		reply string
		want  ackMeta
		ok    bool
	}{
		// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
		{"$JS.ACK.S.C.1.42.7.1700000000000000000.3", ackMeta{sseq: 42, cseq: 7, pending: 3}, true},
		// with <domain>.<account hash> before the stream, and a last token
		{"$JS.ACK._.HASH.S.C.1.42.7.1700000000000000000.3.RANDOM", ackMeta{sseq: 42, cseq: 7, pending: 3}, true},
		{"$JS.ACK.dom.HASH.S.C.2.18446744073709551615.1.1700000000000000000.0", ackMeta{sseq: 1<<64 - 1, cseq: 1, pending: 0}, true},
		// without the last token
		{"$JS.ACK.dom.HASH.S.C.1.5.6.1700000000000000000.9", ackMeta{sseq: 5, cseq: 6, pending: 9}, true},
		{"$JS.ACK.S.C.1.42.7.1700000000000000000", ackMeta{}, false},     // 8 tokens
		{"$JS.ACK.d.H.S.C.1.42.7.1700000000000000000", ackMeta{}, false}, // 10 tokens
		{"$JS.ACK.S.C.1.x.7.1700000000000000000.3", ackMeta{}, false},    // not a number
		{"$JS.NAK.S.C.1.42.7.1700000000000000000.3", ackMeta{}, false},   // not an ack subject
		{"", ackMeta{}, false},
	} {
		got, err := parseAck(c.reply)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseAck(%q) = %+v, %v; want %+v, ok %v", c.reply, got, err, c.want, c.ok)
		}
	}
}

// BenchmarkParseAck: one message's metadata, on a List's or watch's path.
func BenchmarkParseAck(b *testing.B) {
	r := "$JS.ACK.KV_bucket.dbinformer_0123456789abcdef01234567.1.123456.654321.1765000000000000000.99999"
	for b.Loop() {
		if _, err := parseAck(r); err != nil {
			b.Fatal(err)
		}
	}
}
