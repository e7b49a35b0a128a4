package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
)

// EventStream is a harness over a fresh stream "S<n>" on the subjects
// "s<n>.>": each event sets an entity to a version or deletes it; the
// ListerWatcher folds the subjects "s<n>.w.>" (the entity is the rest of
// the subject), PutUnwatched writes "s<n>.u.other".
type EventStream struct {
	base
	root string
	lw   *natsinformer.EventStream[Obj]
}

var (
	_ conformance.Harness[Obj] = (*EventStream)(nil)
	_ conformance.Expirer      = (*EventStream)(nil)
	_ conformance.Unwatched    = (*EventStream)(nil)
	_ conformance.Truth        = (*EventStream)(nil)
	_ conformance.Faults       = (*EventStream)(nil)
)

// Event is the message of an EventStream harness.
type Event struct {
	Op string `json:"op"` // "set" or "del"
	K  string `json:"k"`
	V  int64  `json:"v"`
}

// Reduce is the EventStream harness's reducer: "set" sets, "del" deletes.
func Reduce(prev Obj, exists bool, m natsinformer.Message) (Obj, bool, error) {
	var ev Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		return prev, exists, err
	}
	switch ev.Op {
	case "set":
		return Obj{K: ev.K, V: ev.V}, true, nil
	case "del":
		return Obj{}, false, nil
	}
	return prev, exists, fmt.Errorf("unknown op %q", ev.Op)
}

// retryPlacement repeats create while a cluster refuses it for want of
// peers online (API error 10005, "no suitable peers for placement, peer
// offline"): in CI an R3 stream was refused so right after
// servers.NATSCluster.WaitReady had seen every peer online.
func retryPlacement[T any](ctx context.Context, create func() (T, error)) (T, error) {
	for {
		v, err := create()
		var api *jetstream.APIError
		if err == nil || !errors.As(err, &api) || api.ErrorCode != 10005 {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NewEventStream creates the stream and the ListerWatcher.
func NewEventStream(t testing.TB, cfg Config) *EventStream {
	t.Helper()
	h := &EventStream{}
	h.setup(t, cfg)
	n := seq.Add(1)
	h.name = fmt.Sprintf("S%d", n)
	h.root = fmt.Sprintf("s%d", n)
	h.prefix = h.root + ".w."
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	h.stream, err = retryPlacement(ctx, func() (jetstream.Stream, error) {
		return h.writer.CreateStream(ctx, jetstream.StreamConfig{
			Name: h.name, Subjects: []string{h.root + ".>"}, Storage: jetstream.FileStorage, Replicas: h.cfg.Replicas,
		})
	})
	if err != nil {
		t.Fatalf("natstest: create stream %q: %v", h.name, err)
	}
	if cfg.Cluster != nil {
		cfg.Cluster.WaitStreamLeader(t, h.name)
	}
	h.lw, err = natsinformer.NewEventStream(ctx, h.lwJS, h.name, natsinformer.EventStreamOptions[Obj]{
		// The entity is the rest of the subject after "s<n>.w.", dots
		// and all, as Truth reads it.
		Filter: h.prefix + ">", Key: func(subject string) (string, error) { return strings.TrimPrefix(subject, h.prefix), nil },
		Reduce: Reduce, IdleCheck: cfg.IdleCheck, BatchSize: cfg.BatchSize, Stateless: cfg.Stateless,
	})
	if err != nil {
		t.Fatalf("natstest: NewEventStream: %v", err)
	}
	return h
}

// ListerWatcher is the adapter under test.
func (h *EventStream) ListerWatcher() driver.ListerWatcher[Obj] { return h.lw }

// EventStream is the adapter under test, typed.
func (h *EventStream) EventStream() *natsinformer.EventStream[Obj] { return h.lw }

// Root is the first token of the stream's subjects.
func (h *EventStream) Root() string { return h.root }

func (h *EventStream) send(ctx context.Context, subject string, ev Event) (core.ResourceVersion, error) {
	data, _ := json.Marshal(ev)
	m := nats.NewMsg(subject)
	m.Data = data
	return h.publish(ctx, m)
}

// Put publishes a "set" event for key with version n.
func (h *EventStream) Put(ctx context.Context, key string, n int64) (core.ResourceVersion, error) {
	return h.send(ctx, h.prefix+key, Event{Op: "set", K: key, V: n})
}

// Delete publishes a "del" event for key.
func (h *EventStream) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	return h.send(ctx, h.prefix+key, Event{Op: "del", K: key})
}

// Version is the version Put gave obj.
func (h *EventStream) Version(obj Obj) int64 { return obj.V }

// PutUnwatched publishes outside the watched subjects.
func (h *EventStream) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	return h.send(ctx, h.root+".u.other", Event{Op: "set", K: "other", V: 1})
}

// Truth folds the last event of every watched subject (each event says
// all there is to know), read from the stream leader.
func (h *EventStream) Truth(ctx context.Context) (map[string]int64, error) {
	return h.truth(ctx, func(m *nats.RawStreamMsg) (int64, bool, error) {
		var ev Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			return 0, false, err
		}
		return ev.V, ev.Op == "set", nil
	})
}
