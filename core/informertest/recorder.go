package informertest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/dbinformer/dbinformer/core"
)

// Recorder is a core.ResourceEventHandler that logs every notification,
// one line each, in one format:
//
//	add k v=3           an add (isInInitialList false)
//	add k v=3 initial   an add of the initial list, or of the replay a
//	                    handler added late receives
//	update k 3->4       an update from version 3 to 4 (3->3: a resync or
//	                    a relisted unchanged object)
//	delete k v=4        a delete carrying version 4
//	delete k v=4 unknown  a delete inferred by a relist
//	                    (finalStateUnknown)
//
// and keeps the view the handler has: each held key at the version it last
// saw. It fails the test (t.Errorf, from the handler's goroutine) when a
// key's version goes backwards (a smaller version than the highest the
// handler saw for it, deletes included, so versions must grow across a
// delete and a re-create, as a global counter or a source's RV do), when an
// update's old object is not the one the handler holds, when a delete
// names a key the handler does not hold, and when a delete not inferred by
// a relist carries a version older than the one held.
//
// The waits (Expect, ExpectSet, WaitState, Wait) wake on the notification
// itself and give up, failing the test, after Timeout. Call them from the
// test's goroutine. A Recorder is safe for concurrent use; register it
// with one informer.
type Recorder[T any] struct {
	t       TB
	version func(T) int64

	mu      sync.Mutex
	log     []string
	read    int              // lines already consumed by Expect and ExpectSet
	live    map[string]int64 // the handler's view
	highest map[string]int64 // highest version seen per key, kept across deletes
	changed notifier
}

var _ core.ResourceEventHandler[int] = (*Recorder[int])(nil)

// NewRecorder returns an empty Recorder that reads an object's version with
// version.
func NewRecorder[T any](t TB, version func(T) int64) *Recorder[T] {
	return &Recorder[T]{t: t, version: version, live: map[string]int64{}, highest: map[string]int64{}}
}

// OnAdd implements core.ResourceEventHandler.
func (r *Recorder[T]) OnAdd(key string, obj T, initial bool) {
	v := r.version(obj)
	line := fmt.Sprintf("add %s v=%d", key, v)
	if initial {
		line += " initial"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forward(key, v, line)
	r.append(line)
	r.live[key] = v
}

// OnUpdate implements core.ResourceEventHandler.
func (r *Recorder[T]) OnUpdate(key string, oldObj, newObj T) {
	ov, nv := r.version(oldObj), r.version(newObj)
	line := fmt.Sprintf("update %s %d->%d", key, ov, nv)
	r.mu.Lock()
	defer r.mu.Unlock()
	if held, ok := r.live[key]; !ok {
		r.t.Errorf("informertest: %s: the handler does not hold %q", line, key)
	} else if held != ov {
		r.t.Errorf("informertest: %s: the old object is at version %d, but the handler holds version %d", line, ov, held)
	}
	r.forward(key, nv, line)
	r.append(line)
	r.live[key] = nv
}

// OnDelete implements core.ResourceEventHandler.
func (r *Recorder[T]) OnDelete(key string, obj T, unknown bool) {
	v := r.version(obj)
	line := fmt.Sprintf("delete %s v=%d", key, v)
	if unknown {
		line += " unknown"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	held, ok := r.live[key]
	switch {
	case !ok:
		r.t.Errorf("informertest: %s: the handler does not hold %q", line, key)
	case !unknown && v < held:
		r.t.Errorf("informertest: %s: the delete carries version %d, older than the version %d the handler holds", line, v, held)
	}
	r.append(line)
	delete(r.live, key)
}

// forward reports v going backwards for key.
func (r *Recorder[T]) forward(key string, v int64, line string) {
	if h, ok := r.highest[key]; ok && v < h {
		r.t.Errorf("informertest: %s: version of %q went backwards: %d after %d", line, key, v, h)
	}
	if h, ok := r.highest[key]; !ok || v > h {
		r.highest[key] = v
	}
}

func (r *Recorder[T]) append(line string) {
	r.log = append(r.log, line)
	r.changed.notify()
}

// Log returns every line logged so far.
func (r *Recorder[T]) Log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// State returns the handler's view: every key it holds, with the version
// it last saw.
func (r *Recorder[T]) State() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.live)
}

// Expect waits for the next len(want) lines not yet consumed by Expect or
// ExpectSet and fails the test (Fatalf) unless they are want, in order.
func (r *Recorder[T]) Expect(want ...string) {
	r.t.Helper()
	got := r.take(len(want))
	if !slices.Equal(got, want) {
		r.t.Fatalf("informertest: handler logged\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// ExpectSet is Expect for lines whose order does not matter (the adds of
// one list, the deletes of one relist).
func (r *Recorder[T]) ExpectSet(want ...string) {
	r.t.Helper()
	got := r.take(len(want))
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		r.t.Fatalf("informertest: handler logged, in any order,\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// ExpectNone fails the test if a line not yet consumed by Expect or
// ExpectSet was logged. It checks only what has arrived: to show that
// nothing more comes, make a change and Expect its line next.
func (r *Recorder[T]) ExpectNone() {
	r.t.Helper()
	r.mu.Lock()
	extra := slices.Clone(r.log[r.read:])
	r.mu.Unlock()
	if len(extra) > 0 {
		r.t.Fatalf("informertest: handler logged, unexpectedly,\n\t%s", strings.Join(extra, "\n\t"))
	}
}

// take waits for n unread lines and consumes them.
func (r *Recorder[T]) take(n int) []string {
	r.t.Helper()
	ctx, cancel := waitContext(r.t)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.log)-r.read < n {
		ch := r.changed.wait()
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		r.mu.Lock()
		if ctx.Err() != nil && len(r.log)-r.read < n {
			got := r.log[r.read:]
			r.t.Fatalf("informertest: gave up after %s waiting for %d handler notifications; got %d:\n\t%s", budget(ctx), n, len(got), strings.Join(got, "\n\t"))
		}
	}
	got := slices.Clone(r.log[r.read : r.read+n])
	r.read += n
	return got
}

// Wait waits until cond, given the log and the handler's view, returns true,
// and fails the test (Fatalf) after Timeout, naming what.
func (r *Recorder[T]) Wait(what string, cond func(log []string, state map[string]int64) bool) {
	r.t.Helper()
	ctx, cancel := waitContext(r.t)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	for !cond(r.log, r.live) {
		ch := r.changed.wait()
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		r.mu.Lock()
		if ctx.Err() != nil && !cond(r.log, r.live) {
			r.t.Fatalf("informertest: gave up after %s waiting for %s; the handler holds %v; its log ends\n\t%s", budget(ctx), what, r.live, strings.Join(tail(r.log, 20), "\n\t"))
		}
	}
}

// WaitState waits until the handler's view is exactly want (key ->
// version), and fails the test with the difference after Timeout.
func (r *Recorder[T]) WaitState(want map[string]int64) {
	r.t.Helper()
	ctx, cancel := waitContext(r.t)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	for !maps.Equal(r.live, want) {
		ch := r.changed.wait()
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		r.mu.Lock()
		if ctx.Err() != nil && !maps.Equal(r.live, want) {
			r.t.Fatalf("informertest: gave up after %s waiting for the handler's view:\n\t%s", budget(ctx), strings.Join(Diff("handler", r.live, want), "\n\t"))
		}
	}
}

func tail(s []string, n int) []string { return s[max(0, len(s)-n):] }

// Diff returns one line per key where got and want (key -> version)
// differ, sorted by key, naming got as what; nil when they are equal.
func Diff(what string, got, want map[string]int64) []string {
	keys := slices.Sorted(maps.Keys(got))
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case gok && !wok:
			out = append(out, fmt.Sprintf("%s holds %q at version %d; want it absent", what, k, g))
		case !gok && wok:
			out = append(out, fmt.Sprintf("%s lacks %q; want version %d", what, k, w))
		case g != w:
			out = append(out, fmt.Sprintf("%s holds %q at version %d; want version %d", what, k, g, w))
		}
	}
	return out
}
