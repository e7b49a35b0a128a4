package conformance

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

func cases[T any]() []testCase[T] {
	return []testCase[T]{
		{"ListEmpty", listEmpty[T]},
		{"ListAfterWrites", listAfterWrites[T]},
		{"ListMany", listMany[T]},
		{"ListEmitError", listEmitError[T]},
		{"ListConsistentUnderWrites", listConsistentUnderWrites[T]},
		{"WatchFromList", watchFromList[T]},
		{"WatchFromMiddle", watchFromMiddle[T]},
		{"WatchLive", watchLive[T]},
		{"Deletes", deletes[T]},
		{"Resume", resume[T]},
		{"Transaction", transaction[T]},
		{"Expired", expired[T]},
		{"Bookmark", bookmark[T]},
		{"Cancel", cancelCase[T]},
		{"EmitError", emitError[T]},
		{"Dropped", dropped[T]},
		{"WarmRestart", warmRestart[T]},
		{"CapabilitiesSurviveWrappers", capabilitiesSurviveWrappers[T]},
	}
}

// listEmpty: an empty source lists nothing, and its RV is a valid place to
// start watching.
func listEmpty[T any](e *env[T]) {
	got, rv := e.list()
	e.checkListed(got, rv)
	r := e.watch(rv, 0)
	w := e.put("alpha", 1)
	if w.rv <= rv {
		e.t.Errorf("Put after List returned RV %d, not after the List's RV %d", w.rv, rv)
	}
	r.expectNoMore()
}

// listAfterWrites: List returns exactly the live keys at their latest
// versions, and watching from its RV delivers only what comes after.
func listAfterWrites[T any](e *env[T]) {
	e.put("alpha", 1)
	e.put("bravo", 1)
	e.put("charlie", 1)
	e.put("bravo", 2)
	e.put("delta", 1)
	e.del("charlie")
	e.put("alpha", 3)
	got, rv := e.list()
	e.checkListed(got, rv)
	r := e.watch(rv, len(e.writes))
	e.put("echo", 1)
	e.put("bravo", 4)
	r.expectNoMore()
}

// listMany: enough keys that an adapter with a small page size goes
// through several pages, with updates and deletes spread among them.
func listMany[T any](e *env[T]) {
	for i := range 30 {
		e.put(fmt.Sprintf("item-%02d", i), 1)
	}
	for i := 0; i < 30; i += 3 {
		e.put(fmt.Sprintf("item-%02d", i), 2)
	}
	for i := 1; i < 30; i += 4 {
		e.del(fmt.Sprintf("item-%02d", i))
	}
	got, rv := e.list()
	e.checkListed(got, rv)
	r := e.watch(rv, len(e.writes))
	e.put("item-01", 3)
	r.expectNoMore()
}

// listEmitError: List stops at the first Emit error and returns it.
func listEmitError[T any](e *env[T]) {
	e.put("alpha", 1)
	e.put("bravo", 1)
	boom := errors.New("conformance: emit refused")
	calls := 0
	ctx, cancel := e.opCtx()
	defer cancel()
	_, err := e.lw.List(ctx, driver.ListSink[T]{Emit: func(driver.Event[T]) error {
		calls++
		return boom
	}})
	if !errors.Is(err, boom) {
		e.t.Errorf("List with an Emit that fails returned %v, want the Emit's error", err)
	}
	if calls != 1 {
		e.t.Errorf("List called Emit %d times after it failed, want 1", calls)
	}
}

// watchFromList: Watch from a List's RV delivers every later change, with
// Added for creations, Modified for updates and Deleted for deletes,
// including a key deleted and created again.
func watchFromList[T any](e *env[T]) {
	_, rv := e.list()
	r := e.watch(rv, 0)
	e.put("alpha", 1)
	e.put("bravo", 1)
	e.put("alpha", 2)
	e.del("bravo")
	e.put("bravo", 3)
	e.put("alpha", 4)
	e.del("alpha")
	r.expectNoMore()
}

// watchFromMiddle: Watch from the RV of any past write delivers exactly the
// writes after it, whether or not they were already delivered elsewhere.
func watchFromMiddle[T any](e *env[T]) {
	keys := []string{"alpha", "bravo", "charlie", "delta"}
	for i := range 24 {
		k := keys[i%len(keys)]
		if _, ok := e.live[k]; ok && i%5 == 3 {
			e.del(k)
		} else {
			e.put(k, int64(i+1))
		}
	}
	for _, i := range []int{0, 5, 11, 17, len(e.writes) - 2, len(e.writes) - 1} {
		r := e.watchAfter(i)
		if !r.expectAll() {
			return
		}
		r.stop()
	}
	e.watchAfter(len(e.writes) - 1).expectNoMore()
}

// watchLive: a watch that is caught up keeps delivering writes made while
// it waits.
func watchLive[T any](e *env[T]) {
	e.put("alpha", 1)
	r := e.watchAfter(0)
	for i := int64(2); i <= 6; i++ {
		e.put("alpha", i)
		if i%2 == 0 {
			e.put(fmt.Sprintf("key-%d", i), int64(i))
		}
		if !r.expectAll() {
			return
		}
	}
	r.expectNoMore()
}

// deletes: a delete carries the key, and the last object when the source
// says it can (Capabilities.DeletesCarryObject); a delete watched from just
// before it is reported too.
func deletes[T any](e *env[T]) {
	e.put("alpha", 1)
	e.put("alpha", 2)
	e.put("bravo", 7)
	r := e.watchAfter(len(e.writes) - 1)
	e.del("alpha")
	e.del("bravo")
	e.put("alpha", 3)
	e.del("alpha")
	r.expectNoMore()
	got, rv := e.list()
	e.checkListed(got, rv)
}

// resume: a watch stopped after a batch and reopened from the last RV it
// delivered continues with nothing missing and nothing repeated, which is
// what the Reflector does after a broken watch.
func resume[T any](e *env[T]) {
	_, rv := e.list()
	for i := int64(1); i <= 8; i++ {
		e.put(fmt.Sprintf("key-%d", i%3), i)
	}
	r := e.watch(rv, 0)
	ctx, cancel := e.opCtx()
	defer cancel()
	for {
		if err := r.fill(ctx); err != nil {
			e.t.Fatalf("Watch(%d): %v", rv, err)
		}
		if slicesContainsChange(r.buf) {
			break
		}
	}
	// Consume exactly the first batch, then resume from its last RV.
	var last core.ResourceVersion
	n := 0
	for _, ev := range r.buf {
		last = ev.RV
		if ev.Type != driver.Bookmark {
			if n == len(e.writes) {
				e.t.Fatalf("Watch(%d): got %s after the events of all %d writes", rv, describe(e, ev), n)
			}
			if msg := e.mismatch(ev, e.writes[n]); msg != "" {
				e.t.Fatalf("Watch(%d): want the event of %s, got %s: %s", rv, e.writes[n], describe(e, ev), msg)
			}
			n++
		}
	}
	r.stop()
	e.t.Logf("first batch held %d of %d changes; resuming from RV %d", n, len(e.writes), last)
	r2 := e.watch(last, n)
	e.put("key-1", 9)
	r2.expectNoMore()
}

func slicesContainsChange[T any](evs []driver.Event[T]) bool {
	for _, ev := range evs {
		if ev.Type != driver.Bookmark {
			return true
		}
	}
	return false
}

// transaction: the events of one transaction share an RV and arrive in
// one batch, so that an informer never shows half of it.
func transaction[T any](e *env[T]) {
	tx, ok := e.h.(Transactor)
	if !ok {
		e.t.Logf("the Harness does not implement conformance.Transactor; transactions not checked")
		return
	}
	e.put("alpha", 1)
	r := e.watchAfter(0)
	keys := []string{"alpha", "bravo", "charlie"}
	ctx, cancel := e.opCtx()
	defer cancel()
	rv, err := tx.PutAll(ctx, keys, 2)
	if err != nil {
		e.t.Fatalf("Harness.PutAll: %v", err)
	}
	if rv <= e.lastRV() {
		e.t.Fatalf("Harness.PutAll returned RV %d, not after the previous write's RV %d", rv, e.lastRV())
	}
	want := make(map[string]write)
	for _, k := range keys {
		typ := driver.Added
		if _, ok := e.live[k]; ok {
			typ = driver.Modified
		}
		w := write{key: k, n: 2, typ: typ, rv: rv, after: e.lastRV()}
		want[e.eventKey(k)] = w
	}
	for _, w := range want {
		e.live[w.key] = 2
	}
	// The first batch with a change must hold the whole transaction.
	for !slicesContainsChange(r.buf) {
		if err := r.fill(ctx); err != nil {
			e.t.Fatalf("Watch(%d): waiting for the transaction: %v", r.from, err)
		}
	}
	var first core.ResourceVersion
	for _, ev := range r.buf {
		if ev.Type == driver.Bookmark {
			continue
		}
		w, ok := want[ev.Key]
		if !ok {
			e.t.Fatalf("Watch(%d): got %s; want only the %d events of the transaction, all in one batch (missing: %d)", r.from, describe(e, ev), len(keys), len(want))
		}
		if msg := e.mismatch(ev, w); msg != "" {
			e.t.Errorf("Watch(%d): want the event of %s, got %s: %s", r.from, w, describe(e, ev), msg)
		}
		if first == 0 {
			first = ev.RV
		} else if ev.RV != first {
			e.t.Errorf("Watch(%d): the transaction's events carry RVs %d and %d, want one", r.from, first, ev.RV)
		}
		delete(want, ev.Key)
	}
	r.buf = nil
	for k := range want {
		e.t.Errorf("Watch(%d): the first batch with a change lacks %q of the transaction (split across batches, or lost)", r.from, k)
	}
	// Later writes are compared with the transaction as the previous write.
	for _, k := range keys {
		e.writes = append(e.writes, write{key: k, n: 2, typ: driver.Modified, rv: rv, after: rv})
	}
	r.next = len(e.writes)
	r.expectNoMore()
}

// expired: after Expire, watching from an RV before it fails with an error
// matching driver.ErrExpired, having emitted nothing, and the relist the
// Reflector then does works.
func expired[T any](e *env[T]) {
	x, ok := e.h.(Expirer)
	if !ok {
		e.t.Logf("the Harness does not implement conformance.Expirer; expiry not checked")
		return
	}
	e.put("alpha", 1)
	e.put("bravo", 1)
	e.put("alpha", 2)
	ctx, cancel := e.opCtx()
	defer cancel()
	if err := x.Expire(ctx); err != nil {
		e.t.Fatalf("Harness.Expire: %v", err)
	}
	from := e.writes[0].rv
	r := e.watch(from, 1)
	err, ok := r.result(e.caps.timeout())
	if !ok {
		e.t.Errorf("Watch(%d) after Expire did not return within %s; want an error matching core.ErrExpired", from, e.caps.timeout())
	} else if !errors.Is(err, driver.ErrExpired) {
		e.t.Errorf("Watch(%d) after Expire returned %v, want an error matching core.ErrExpired", from, err)
	}
	r.mu.Lock()
	queued := slices.Concat(r.queued...)
	r.mu.Unlock()
	if len(queued) > 0 {
		// Even a Bookmark is wrong: it would claim that the changes
		// since from, which are gone, were delivered.
		e.t.Errorf("Watch(%d) after Expire emitted %d events (first: %s) before its error; want none", from, len(queued), describe(e, queued[0]))
	}
	r.stopQuietly()
	// Expire may have removed the data too (a purged stream), so the
	// relist is checked for consistency with its own watch, not the model.
	got, rv := e.list()
	e.t.Logf("List after Expire at RV %d returned %d keys", rv, len(got))
	r = e.watch(rv, len(e.writes))
	e.live = got
	e.put("charlie", 1)
	r.expectNoMore()
}

// bookmark: a version that touched no watched key is still reachable: after
// PutUnwatched returns R, the watch delivers a Bookmark at R or later, on
// request (driver.ProgressReporter: a receive on WatchOptions.Progress) or on
// its own.
func bookmark[T any](e *env[T]) {
	e.put("alpha", 1)
	r := e.watchAfter(0)
	target := e.writes[0].rv
	ctx, cancel := e.opCtx()
	defer cancel()
	u, unwatched := e.h.(Unwatched)
	if unwatched {
		rv, err := u.PutUnwatched(ctx)
		if err != nil {
			e.t.Fatalf("Harness.PutUnwatched: %v", err)
		}
		if rv <= target {
			e.t.Errorf("PutUnwatched returned RV %d, not after the previous write's RV %d", rv, target)
		}
		target = max(target, rv)
	}
	pr, canRequest := driver.Capability[driver.ProgressReporter](e.lw)
	canRequest = canRequest && pr.ReportsProgress()
	if !unwatched && !canRequest {
		e.t.Logf("the Harness does not implement conformance.Unwatched and the ListerWatcher does not report progress (driver.ProgressReporter); bookmarks not checked")
		return
	}
	wait := e.caps.bookmarkTimeout()
	if canRequest {
		wait = e.caps.timeout()
		r.progress <- struct{}{} // sent after the write: the answer must reach it
	}
	deadline := time.Now().Add(wait)
	for {
		ev, err := r.nextEvent(time.Until(deadline))
		if err != nil {
			e.t.Fatalf("Watch(%d): waiting for a Bookmark at RV %d or later (requested: %t): %v", r.from, target, canRequest, err)
		}
		if ev.Type != driver.Bookmark {
			e.t.Fatalf("Watch(%d): got %s while no watched key was written", r.from, describe(e, ev))
		}
		if ev.RV >= target {
			e.t.Logf("Bookmark at RV %d (target %d)", ev.RV, target)
			break
		}
	}
	if canRequest {
		// A second request, with nothing written since: answered too, at
		// the same head or later. If the first is still unread (the
		// Bookmark above came on its own), that one must be answered.
		select {
		case r.progress <- struct{}{}:
		default:
		}
		for {
			ev, err := r.nextEvent(time.Until(time.Now().Add(e.caps.timeout())))
			if err != nil {
				e.t.Fatalf("Watch(%d): waiting for the Bookmark answering a second progress request: %v", r.from, err)
			}
			if ev.Type != driver.Bookmark {
				e.t.Fatalf("Watch(%d): got %s while no watched key was written", r.from, describe(e, ev))
			}
			if ev.RV >= target {
				break
			}
		}
	}
	// A bookmark must not make the watch skip what follows it.
	e.put("bravo", 1)
	r.expectNoMore()
}
