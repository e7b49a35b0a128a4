package shard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/shard"
)

// stubLW replays fixed events: a unit test of Source's filtering alone.
type stubLW struct{ events []driver.Event[int] }

func (s stubLW) List(_ context.Context, sink driver.ListSink[int]) (core.ResourceVersion, error) {
	for _, ev := range s.events {
		if err := sink.Emit(ev); err != nil {
			return 0, err
		}
	}
	return 9, nil
}

func (s stubLW) Watch(_ context.Context, _ core.ResourceVersion, opts driver.WatchOptions[int]) error {
	if err := opts.Emit(append([]driver.Event[int](nil), s.events...)); err != nil {
		return err
	}
	return errors.New("stub: end")
}

// keyIn returns a key of shard sh out of n.
func keyIn(sh, n int) string {
	for i := 0; ; i++ {
		if k := fmt.Sprint("key-", i); shard.Of(k, n) == sh {
			return k
		}
	}
}

// Keys of other shards never reach the informer as objects, nor as decode
// errors: each undecodable key is reported once, by its owner.
func TestSourceFiltersAtDecode(t *testing.T) {
	const n = 4
	mine, theirs := keyIn(1, n), keyIn(2, n)
	bad := errors.New("undecodable")
	lw := stubLW{events: []driver.Event[int]{
		{Type: driver.Added, Key: mine, Object: 1, HasObject: true, RV: 5},
		{Type: driver.Added, Key: theirs, Object: 2, HasObject: true, RV: 5},
		{Type: driver.Added, Key: mine + "-bad", Err: bad, RV: 5},
		{Type: driver.Added, Key: theirs, Err: bad, RV: 5},
	}}
	if shard.Of(mine+"-bad", n) != 1 {
		lw.events[2].Key = keyIn(1, n) // same shard as mine
	}
	s, err := shard.New(stubBackend{}, shard.Options{ID: "r", Shards: n})
	if err != nil {
		t.Fatal(err)
	}
	src, err := shard.NewSource[int](s, lw)
	if err != nil {
		t.Fatal(err)
	}
	shard.Own(src, 1)
	var listed []driver.Event[int]
	if _, err := src.List(context.Background(), driver.ListSink[int]{Emit: func(ev driver.Event[int]) error {
		listed = append(listed, ev)
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[0].Key != mine || listed[1].Err == nil || shard.Of(listed[1].Key, n) != 1 {
		t.Fatalf("List passed %+v; want %s and the decode error of shard 1 only", listed, mine)
	}
	var watched []driver.Event[int]
	_ = src.Watch(context.Background(), 9, driver.WatchOptions[int]{Emit: func(b []driver.Event[int]) error {
		watched = append(watched, b...)
		return nil
	}})
	if len(watched) != 4 {
		t.Fatalf("Watch emitted %d events, want 4 (versions advance for every change)", len(watched))
	}
	for _, ev := range watched {
		if shard.Of(ev.Key, n) == 1 {
			continue
		}
		if ev.Type != driver.Deleted || ev.HasObject || ev.Err != nil {
			t.Errorf("a change of %s (shard 2) reached the informer as %v (object %v, err %v); want a delete without object", ev.Key, ev.Type, ev.HasObject, ev.Err)
		}
	}
}

// stubBackend is never joined: the Sharder does not run in this test.
type stubBackend struct{}

func (stubBackend) Join(context.Context, shard.Member, time.Duration) (shard.Session, error) {
	return nil, errors.New("stub")
}
func (stubBackend) String() string { return "stub" }
