package natsinformer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
)

var streamSeq atomic.Int64

// newStream creates a fresh file-backed stream "S<n>" on subjects "s<n>.>"
// and returns it with its subject root.
func newStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, string) {
	t.Helper()
	n := streamSeq.Add(1)
	root := fmt.Sprintf("s%d", n)
	cfg.Name = fmt.Sprintf("S%d", n)
	cfg.Subjects = []string{root + ".>"}
	cfg.Storage = jetstream.FileStorage
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %q: %v", cfg.Name, err)
	}
	return st, root
}

// setEvent is the event of the conformance source: set version n, or
// delete the entity.
type setEvent struct {
	Op string `json:"op"` // "set" or "del"
	N  int    `json:"n"`
}

func reduceSet(prev item, exists bool, m natsinformer.Message) (item, bool, error) {
	var ev setEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		return prev, exists, err
	}
	switch ev.Op {
	case "set":
		return item{N: ev.N}, true, nil
	case "del":
		return item{}, false, nil
	}
	return prev, exists, fmt.Errorf("unknown op %q", ev.Op)
}

type streamSource struct {
	js     jetstream.JetStream
	st     jetstream.Stream
	root   string
	lw     *natsinformer.EventStream[item]
	rvSeen core.ResourceVersion
}

func (s *streamSource) ListerWatcher() core.ListerWatcher[item] { return s.lw }

func (s *streamSource) publish(ctx context.Context, subject string, ev setEvent) (core.ResourceVersion, error) {
	b, _ := json.Marshal(ev)
	ack, err := s.js.Publish(ctx, subject, b)
	if err != nil {
		return 0, err
	}
	return core.ResourceVersion(ack.Sequence), nil
}

func (s *streamSource) Put(ctx context.Context, key string, n int) (core.ResourceVersion, error) {
	return s.publish(ctx, s.root+".w."+key, setEvent{Op: "set", N: n})
}

func (s *streamSource) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	return s.publish(ctx, s.root+".w."+key, setEvent{Op: "del"})
}

func (s *streamSource) Version(o item) int { return o.N }

func (s *streamSource) Expire(ctx context.Context) error { return s.st.Purge(ctx) }

func (s *streamSource) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	return s.publish(ctx, s.root+".u.other", setEvent{Op: "set", N: 1})
}

func newStreamLW(t testing.TB, js jetstream.JetStream, name, filter string) *natsinformer.EventStream[item] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lw, err := natsinformer.NewEventStream(ctx, js, name, natsinformer.EventStreamOptions[item]{
		Filter: filter,
		Reduce: reduceSet,
	})
	if err != nil {
		t.Fatalf("NewEventStream: %v", err)
	}
	return lw
}

func TestEventStreamConformance(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	caps := conformance.Capabilities{ExactWriteRV: true, DeletesCarryObject: true, DistinguishesUpdate: true, StrictGoroutines: true}
	conformance.Run(t, caps, func(t *testing.T) conformance.Source[item] {
		st, root := newStream(t, js, jetstream.StreamConfig{})
		return &streamSource{js: js, st: st, root: root, lw: newStreamLW(t, js, st.CachedInfo().Config.Name, root+".w.*")}
	})
}

func TestEventStreamMissing(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := natsinformer.NewEventStream(ctx, js, "NOPE", natsinformer.EventStreamOptions[item]{Reduce: reduceSet})
	if !errors.Is(err, jetstream.ErrStreamNotFound) || !contains(err.Error(), `"NOPE" does not exist`) {
		t.Fatalf("NewEventStream on a missing stream: %v, want an error naming it and matching ErrStreamNotFound", err)
	}
}
