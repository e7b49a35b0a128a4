package natsinformer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// Account is the folded state of one bank account.
type Account struct {
	Balance int64
	Events  int
}

type accountEvent struct {
	Type   string `json:"type"` // open, deposit, withdraw, close
	Amount int64  `json:"amount,omitempty"`
}

func reduceAccount(prev Account, exists bool, m natsinformer.Message) (Account, bool, error) {
	var ev accountEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		return prev, exists, err
	}
	switch ev.Type {
	case "open":
		return Account{Events: 1}, true, nil
	case "deposit", "withdraw":
		if !exists {
			return prev, false, fmt.Errorf("%s on an account that is not open", ev.Type)
		}
		if ev.Type == "withdraw" {
			ev.Amount = -ev.Amount
		}
		return Account{Balance: prev.Balance + ev.Amount, Events: prev.Events + 1}, true, nil
	case "close":
		return prev, false, nil
	}
	return prev, exists, fmt.Errorf("unknown event type %q", ev.Type)
}

// bank generates account events and folds them directly, the reference the
// informer is compared with.
type bank struct {
	r    *rand.Rand
	open map[string]bool
	want map[string]Account
}

func (b *bank) next() (string, accountEvent) {
	id := fmt.Sprintf("a%02d", b.r.IntN(40))
	var ev accountEvent
	switch {
	case !b.open[id]:
		ev = accountEvent{Type: "open"}
	case b.r.IntN(25) == 0:
		ev = accountEvent{Type: "close"}
	case b.r.IntN(2) == 0:
		ev = accountEvent{Type: "deposit", Amount: int64(b.r.IntN(1000))}
	default:
		ev = accountEvent{Type: "withdraw", Amount: int64(b.r.IntN(500))}
	}
	a := b.want[id]
	switch ev.Type {
	case "open":
		b.open[id] = true
		b.want[id] = Account{Events: 1}
	case "deposit":
		b.want[id] = Account{Balance: a.Balance + ev.Amount, Events: a.Events + 1}
	case "withdraw":
		b.want[id] = Account{Balance: a.Balance - ev.Amount, Events: a.Events + 1}
	case "close":
		delete(b.open, id)
		delete(b.want, id)
	}
	return id, ev
}

func publishAccount(ctx context.Context, t *testing.T, js jetstream.JetStream, root, id string, ev accountEvent) uint64 {
	t.Helper()
	data, _ := json.Marshal(ev)
	ack, err := js.Publish(ctx, root+".acct."+id, data)
	if err != nil {
		t.Fatalf("publish %s %s: %v", id, ev.Type, err)
	}
	return ack.Sequence
}

func accounts(inf *core.SharedIndexInformer[Account]) map[string]Account {
	m := make(map[string]Account)
	inf.Indexer().Range(func(k string, a Account) bool {
		m[k] = a
		return true
	})
	return m
}

// Account events folded by the informer, across a server restart, with a
// bad event in the middle, equal the fold computed directly; a second
// informer started from a snapshot of the first half agrees.
func TestEventStreamAccounts(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	st, root := newStream(t, js, jetstream.StreamConfig{})
	name := st.CachedInfo().Config.Name
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	b := &bank{r: rand.New(rand.NewPCG(1, 2)), open: map[string]bool{}, want: map[string]Account{}}
	for range 600 {
		id, ev := b.next()
		publishAccount(ctx, t, js, root, id, ev)
	}
	snapshot, snapshotSeq := maps.Clone(b.want), uint64(600)
	// Events that are not account events, and one that does not decode.
	if _, err := js.Publish(ctx, root+".audit.x", []byte("ignored by the filter")); err != nil {
		t.Fatal(err)
	}
	bad, err := js.Publish(ctx, root+".acct.a01", []byte("{oops"))
	if err != nil {
		t.Fatal(err)
	}

	lw, err := natsinformer.NewEventStream(ctx, js, name, natsinformer.EventStreamOptions[Account]{
		Filter:    root + ".acct.*",
		Reduce:    reduceAccount,
		IdleCheck: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	clw := informertest.Wrap[Account](lw)
	inf, sink := startInformer[Account](t, clw)
	synced := clw.Lists() // a list retried before the first sync is not a relist
	var last uint64
	for i := range 900 {
		if i == 400 {
			srv.Restart(t)
		}
		id, ev := b.next()
		last = publishAccount(ctx, t, js, root, id, ev)
	}
	waitFor(t, inf, last)
	if got := accounts(inf); !maps.Equal(got, b.want) {
		t.Fatalf("folded by the informer: %d accounts %v\nfolded directly: %d accounts %v", len(got), got, len(b.want), b.want)
	}
	if n := clw.Lists(); n != synced {
		t.Errorf("informer listed %d times, want no relist after the first sync (the restart resumes)", n)
	}
	var found bool
	for _, err := range sink.All() {
		var de *driver.DecodeError
		if errors.As(err, &de) && de.Key == "a01" && uint64(de.RV) == bad.Sequence && strings.Contains(de.Source, name) {
			found = true
		}
	}
	if !found {
		t.Errorf("no DecodeError for key a01 at sequence %d naming stream %s; reported %v", bad.Sequence, name, sink.All())
	}

	// From the snapshot after the first 600 events.
	slw, err := natsinformer.NewEventStream(ctx, js, name, natsinformer.EventStreamOptions[Account]{
		Filter:      root + ".acct.*",
		Reduce:      reduceAccount,
		Snapshot:    snapshot,
		SnapshotSeq: snapshotSeq,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]Account)
	if _, err := slw.List(ctx, driver.ListSink[Account]{Emit: func(ev driver.Event[Account]) error {
		if ev.Err == nil {
			got[ev.Key] = ev.Object
		}
		return nil
	}}); err != nil {
		t.Fatalf("List from snapshot: %v", err)
	}
	if !maps.Equal(got, b.want) {
		t.Fatalf("folded from the snapshot at %d: %v\nfolded directly: %v", snapshotSeq, got, b.want)
	}
}

// Entity keys from a token position or a function; a key function error is
// reported, not fatal.
func TestEventStreamKeys(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	st, root := newStream(t, js, jetstream.StreamConfig{})
	name := st.CachedInfo().Config.Name
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, subj := range []string{root + ".acct.a1.events", root + ".acct.a2.events", root + ".acct.a1.events"} {
		data, _ := json.Marshal(accountEvent{Type: "open"})
		if _, err := js.Publish(ctx, subj, data); err != nil {
			t.Fatal(err)
		}
	}
	list := func(opts natsinformer.EventStreamOptions[Account]) (map[string]Account, []error) {
		t.Helper()
		opts.Reduce = reduceAccount
		lw, err := natsinformer.NewEventStream(ctx, js, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]Account{}
		var errs []error
		if _, err := lw.List(ctx, driver.ListSink[Account]{Emit: func(ev driver.Event[Account]) error {
			if ev.Err != nil {
				errs = append(errs, ev.Err)
			} else {
				got[ev.Key] = ev.Object
			}
			return nil
		}}); err != nil {
			t.Fatal(err)
		}
		return got, errs
	}
	want := map[string]Account{"a1": {Events: 1}, "a2": {Events: 1}}
	if got, _ := list(natsinformer.EventStreamOptions[Account]{KeyToken: 3}); !maps.Equal(got, want) {
		t.Errorf("KeyToken 3: %v, want %v", got, want)
	}
	if got, _ := list(natsinformer.EventStreamOptions[Account]{KeyToken: -2}); !maps.Equal(got, want) {
		t.Errorf("KeyToken -2: %v, want %v", got, want)
	}
	got, errs := list(natsinformer.EventStreamOptions[Account]{Key: func(s string) (string, error) {
		if s == root+".acct.a2.events" {
			return "", errors.New("no key for a2")
		}
		return "k-" + s[len(root)+6:len(root)+8], nil
	}})
	if !maps.Equal(got, map[string]Account{"k-a1": {Events: 1}}) || len(errs) != 1 {
		t.Errorf("Key func: %v, errors %v", got, errs)
	}
	for _, bad := range []natsinformer.EventStreamOptions[Account]{{}, {Reduce: reduceAccount, Filter: "a.>.b"}} {
		if _, err := natsinformer.NewEventStream(ctx, js, name, bad); err == nil {
			t.Errorf("NewEventStream with %+v: no error", bad)
		}
	}
}

// A reducer that panics on one event is reported like a reducer error; the
// other entities and later events are folded.
func TestEventStreamReducerPanic(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	st, root := newStream(t, js, jetstream.StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lw, err := natsinformer.NewEventStream(ctx, js, st.CachedInfo().Config.Name, natsinformer.EventStreamOptions[Account]{
		Reduce: func(prev Account, exists bool, m natsinformer.Message) (Account, bool, error) {
			if string(m.Data) == "boom" {
				panic("reducer bug")
			}
			return reduceAccount(prev, exists, m)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	inf, sink := startInformer[Account](t, lw)
	publishAccount(ctx, t, js, root, "a1", accountEvent{Type: "open"})
	boom, _ := js.Publish(ctx, root+".acct.a1", []byte("boom"))
	last := publishAccount(ctx, t, js, root, "a1", accountEvent{Type: "deposit", Amount: 5})
	waitFor(t, inf, last)
	if got := accounts(inf); !maps.Equal(got, map[string]Account{"a1": {Balance: 5, Events: 2}}) {
		t.Fatalf("accounts %v", got)
	}
	var found bool
	for _, err := range sink.All() {
		var de *driver.DecodeError
		if errors.As(err, &de) && de.Key == "a1" && uint64(de.RV) == boom.Sequence && strings.Contains(err.Error(), "reducer panicked") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the reducer panic was not reported as a DecodeError for a1 at %d: %v", boom.Sequence, sink.All())
	}
}
