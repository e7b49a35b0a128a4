package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
)

// RunAudit checks the consistency audit (core.InformerOptions.Audit) over
// newHarness's ListerWatcher, which must implement core.AuditLister: an
// informer fed through an informertest.Lossy (the source's truth reaches
// only the audit) is audited
//
//   - after a clean sync: equal;
//   - after five lies (an add, an update and a delete dropped, an update
//     altered, a stale update replayed): exactly those keys reported
//     (1 missing, 1 extra, 3 differing) and healed, the cache then equal to
//     the source, handlers told about those five keys only, and the next
//     audit equal;
//   - while writers change keys during every audit: equal every time (no
//     false positive; changes after the audit's version are in flight).
//
// A Harness that implements Filtered is audited as a partial sync: keys
// outside the filter are written too and must not count.
func RunAudit[T any](t *testing.T, caps Capabilities, newHarness func(t *testing.T) Harness[T]) {
	t.Helper()
	h := newHarness(t)
	lw := h.ListerWatcher()
	if _, ok := core.Capability[core.AuditLister[T]](lw); !ok {
		t.Fatalf("conformance: RunAudit needs a ListerWatcher that implements core.AuditLister; %T does not", lw)
	}
	ek := func(key string) string { return key }
	if m, ok := h.(KeyMapper); ok {
		ek = m.EventKey
	}
	filt, _ := h.(Filtered)
	ctx, cancel := context.WithTimeout(context.Background(), 10*caps.timeout())
	defer cancel()

	var version atomic.Int64
	// put writes key at a version the filter keeps (any, unfiltered).
	put := func(key string) (core.ResourceVersion, int64) {
		t.Helper()
		n := version.Add(1)
		for filt != nil && !filt.Matches(key, n) {
			n = version.Add(1)
		}
		rv, err := h.Put(ctx, key, n)
		if err != nil {
			t.Fatalf("Harness: put %q version %d: %v", key, n, err)
		}
		return rv, n
	}
	name := func(i int) string { return fmt.Sprintf("in.a-%d", i) }
	want := map[string]int64{} // event key → version, what the source holds
	for i := range 12 {
		_, n := put(name(i))
		want[ek(name(i))] = n
	}
	if filt != nil {
		for i := range 4 {
			key := fmt.Sprintf("out.a-%d", i)
			n := version.Add(1)
			for filt.Matches(key, n) {
				n = version.Add(1)
			}
			if _, err := h.Put(ctx, key, n); err != nil {
				t.Fatalf("Harness: put %q: %v", key, err)
			}
		}
	}

	lossy := informertest.NewLossy[T](slowAudit[T]{lw}, informertest.LossyOptions[T]{})
	log := &auditLog[T]{version: h.Version}
	inf, _ := informertest.Run(t, core.ListerWatcher[T](lossy), core.InformerOptions[T]{
		Name:  "audit",
		Audit: &core.AuditOptions[T]{Period: time.Hour, Pace: -1},
	}, log)
	waitRV := func(rv core.ResourceVersion) {
		t.Helper()
		if err := inf.WaitFor(ctx, rv); err != nil {
			t.Fatalf("WaitFor(%d): %v", rv, err)
		}
	}
	head, n0 := put("in.a-0")
	want[ek("in.a-0")] = n0
	waitRV(head)
	r := inf.AuditNow(ctx)
	if r.Outcome != core.AuditEqual || r.Divergent() != 0 {
		t.Fatalf("audit after a clean sync: %v, want equal", r)
	}
	if r.Rows < int64(len(want)) {
		t.Errorf("audit read %d rows, the source holds %d watched keys", r.Rows, len(want))
	}

	// The five lies, each armed right before the write it lies about.
	lie := func(k informertest.LossKind, write func() core.ResourceVersion) {
		t.Helper()
		before := len(lossy.Losses())
		lossy.Arm(k)
		waitRV(write())
		if got := lossy.Losses(); len(got) != before+1 {
			t.Fatalf("lie %s was not told (losses %v)", k, got)
		}
	}
	missing, extra := name(20), name(1)
	altered, stale, dropped := name(2), name(3), name(4)
	lie(informertest.LossDrop, func() core.ResourceVersion { rv, n := put(missing); want[ek(missing)] = n; return rv })
	lie(informertest.LossDrop, func() core.ResourceVersion {
		rv, err := h.Delete(ctx, extra)
		if err != nil {
			t.Fatalf("Harness: delete %q: %v", extra, err)
		}
		delete(want, ek(extra))
		return rv
	})
	lie(informertest.LossDrop, func() core.ResourceVersion { rv, n := put(dropped); want[ek(dropped)] = n; return rv })
	// Alter swaps in the previous change's object: another key's.
	lie(informertest.LossAlter, func() core.ResourceVersion { rv, n := put(altered); want[ek(altered)] = n; return rv })
	prevStale := want[ek(stale)]
	lie(informertest.LossStale, func() core.ResourceVersion { rv, n := put(stale); want[ek(stale)] = n; return rv })

	// The stale replay is the lies' last notification: once the handler
	// has it, it has every earlier one.
	last := fmt.Sprintf("update %s v=%d", ek(stale), prevStale)
	informertest.Eventually(t, "handler told of "+last, func() bool { return log.has(last) })
	mark := log.mark()
	r = inf.AuditNow(ctx)
	if r.Outcome != core.AuditDivergent || r.Missing != 1 || r.Extra != 1 || r.Differing != 3 {
		t.Fatalf("audit after 5 lies (%v): %v, want 1 missing, 1 extra, 3 differing", lossy.Losses(), r)
	}
	if !slices.Equal(r.MissingKeys, []string{ek(missing)}) || !slices.Equal(r.ExtraKeys, []string{ek(extra)}) {
		t.Errorf("audit names missing %v and extra %v, want [%s] and [%s]", r.MissingKeys, r.ExtraKeys, ek(missing), ek(extra))
	}
	wantDiff := []string{ek(dropped), ek(altered), ek(stale)}
	slices.Sort(wantDiff)
	gotDiff := slices.Sorted(slices.Values(r.DifferingKeys))
	if !slices.Equal(gotDiff, wantDiff) {
		t.Errorf("audit names differing %v, want %v", gotDiff, wantDiff)
	}
	if r.Healed != 5 {
		t.Errorf("audit healed %d keys, want 5", r.Healed)
	}
	checkCache(t, inf, h.Version, want)
	// Handlers hear about the five keys, once each, with the source's
	// state.
	healed := map[string]string{
		ek(missing): fmt.Sprintf("add %s v=%d", ek(missing), want[ek(missing)]),
		ek(extra):   "delete " + ek(extra),
		ek(dropped): fmt.Sprintf("update %s v=%d", ek(dropped), want[ek(dropped)]),
		ek(altered): fmt.Sprintf("update %s v=%d", ek(altered), want[ek(altered)]),
		ek(stale):   fmt.Sprintf("update %s v=%d", ek(stale), want[ek(stale)]),
	}
	informertest.Eventually(t, "handler told of 5 healed keys", func() bool { return len(log.since(mark)) >= 5 })
	got := log.since(mark)
	for _, line := range got {
		key := line.key
		if healed[key] != line.text {
			t.Errorf("handler got %q after the audit; the healed keys' notifications are %v", line.text, healed)
		}
		delete(healed, key)
	}
	if r = inf.AuditNow(ctx); r.Outcome != core.AuditEqual {
		t.Fatalf("audit after healing: %v, want equal", r)
	}

	// No false positive while writers change keys during every audit.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// A real server takes about this long per write; an
				// in-memory source unpaced would flood the informer.
				time.Sleep(200 * time.Microsecond)
				key := fmt.Sprintf("in.w%d-%d", w, i%5)
				if i%7 == 6 {
					if _, err := h.Delete(ctx, key); err != nil {
						t.Errorf("Harness: delete %q: %v", key, err)
						return
					}
					continue
				}
				n := version.Add(1)
				for filt != nil && !filt.Matches(key, n) {
					n = version.Add(1)
				}
				if _, err := h.Put(ctx, key, n); err != nil {
					t.Errorf("Harness: put %q: %v", key, err)
					return
				}
			}
		})
	}
	var inFlight int64
	for range 5 {
		r := inf.AuditNow(ctx)
		inFlight += r.InFlight
		if r.Outcome != core.AuditEqual {
			t.Errorf("audit under concurrent writes: %v, want equal", r)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("5 audits under concurrent writes: %d keys in flight in all", inFlight)
}

// checkCache fails t unless the cache holds exactly want (event key →
// version).
func checkCache[T any](t *testing.T, inf *core.SharedIndexInformer[T], version func(T) int64, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	inf.Indexer().Range(func(k string, obj T) bool {
		got[k] = version(obj)
		return true
	})
	for k, n := range want {
		if got[k] != n {
			t.Errorf("after healing the cache holds %q at version %d, the source at %d", k, got[k], n)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("after healing the cache holds %q, which the source does not", k)
		}
	}
}

// auditLog records what a handler is told, one line per notification.
type auditLog[T any] struct {
	version func(T) int64
	mu      sync.Mutex
	lines   []auditLine
}

type auditLine struct{ key, text string }

func (l *auditLog[T]) add(key, text string) {
	l.mu.Lock()
	l.lines = append(l.lines, auditLine{key, text})
	l.mu.Unlock()
}

func (l *auditLog[T]) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

func (l *auditLog[T]) has(text string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.lines, func(a auditLine) bool { return a.text == text })
}

func (l *auditLog[T]) since(m int) []auditLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines[m:])
}

func (l *auditLog[T]) OnAdd(key string, obj T, _ bool) {
	l.add(key, fmt.Sprintf("add %s v=%d", key, l.version(obj)))
}
func (l *auditLog[T]) OnUpdate(key string, _, obj T) {
	l.add(key, fmt.Sprintf("update %s v=%d", key, l.version(obj)))
}
func (l *auditLog[T]) OnDelete(key string, _ T, _ bool) { l.add(key, "delete "+key) }

// slowAudit stretches each audit's read (a millisecond per row) so that
// the concurrent writers' changes land while it reads: the window in which
// a false positive would show.
type slowAudit[T any] struct{ core.ListerWatcher[T] }

func (s slowAudit[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink core.ListSink[T]) (core.ResourceVersion, error) {
	al, _ := core.Capability[core.AuditLister[T]](s.ListerWatcher)
	emit := sink.Emit
	sink.Emit = func(ev core.Event[T]) error {
		time.Sleep(time.Millisecond)
		return emit(ev)
	}
	return al.AuditList(ctx, atLeast, sink)
}
