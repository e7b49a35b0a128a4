package natsinformer_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// A stream's head read from a leader that lags what the watch's consumer
// has already delivered (in a cluster: a leader just elected, or one
// behind the node the consumer reads) is behind the watch's position
// while the stream's creation time is unchanged: the watch reads it
// again, it does not expire (the informer relisted). The stale replies
// here are the real server's STREAM.INFO answers with the last sequence
// set back, through a JetStream API prefix this test serves.
func TestStaleHeadIsReadAgain(t *testing.T) {
	srv := harness.StartNATS(t)
	ctx := context.Background()
	nc := srv.Conn(t)
	var stale atomic.Bool
	var served atomic.Int64
	js := servedJetStream(t, nc, func(m, fwd *nats.Msg) bool {
		if !strings.HasPrefix(fwd.Subject, "$JS.API.STREAM.INFO.") || !stale.Load() {
			return false // the server answers the client itself
		}
		fwd.Reply = ""
		resp, err := nc.RequestMsg(fwd, testWait)
		if err != nil {
			return true
		}
		var info map[string]any
		if err := json.Unmarshal(resp.Data, &info); err == nil {
			if state, ok := info["state"].(map[string]any); ok {
				state["last_seq"] = 1 // a leader that stored only the first message
				served.Add(1)
			}
		}
		data, _ := json.Marshal(info)
		_ = m.Respond(data)
		return true
	})
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "STALE", Subjects: []string{"stale.>"}}); err != nil {
		t.Fatal(err)
	}
	lw, err := natsinformer.NewEventStream(ctx, js, "STALE", natsinformer.EventStreamOptions[string]{
		Reduce:    func(_ string, _ bool, m natsinformer.Message) (string, bool, error) { return string(m.Data), true, nil },
		Key:       func(subject string) (string, error) { return strings.TrimPrefix(subject, "stale."), nil },
		IdleCheck: 20 * time.Millisecond, // many head reads while the replies are stale
	})
	if err != nil {
		t.Fatal(err)
	}
	pub := func(key, v string) uint64 {
		t.Helper()
		ack, err := js.Publish(ctx, "stale."+key, []byte(v))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	for i := range 5 {
		pub("k", string(rune('a'+i)))
	}
	_, from := listAll[string](t, lw)
	w := startWatch[string](t, lw, from)
	stale.Store(true)
	for served.Load() < 5 {
		select {
		case <-w.done:
			t.Fatalf("the watch ended on a stale head: %v", w.err)
		case <-time.After(5 * time.Millisecond): // the next head read
		}
	}
	stale.Store(false)
	seq := pub("k", "after")
	w.wait(t, "the write after the stale heads", hasRV[string](core.ResourceVersion(seq)))
}
