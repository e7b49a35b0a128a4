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
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
)

// RunAudit checks the consistency audit (core.InformerOptions.Audit) over
// newHarness's ListerWatcher, which must implement driver.AuditLister: an
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
	if _, ok := driver.Capability[driver.AuditLister[T]](lw); !ok {
		t.Fatalf("conformance: RunAudit needs a ListerWatcher that implements core.AuditLister; %T does not", lw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*caps.timeout())
	defer cancel()
	a := newAuditRun(t, ctx, h)
	a.seed()
	a.start(lw)
	a.checkClean()
	lies := a.lie()
	a.checkHealed(lies)
	a.checkNoFalsePositive()
}

// auditRun is one run of RunAudit: the harness, what the source holds
// (want) and the informer audited, shared by the run's phases so that each
// can be read on its own.
type auditRun[T any] struct {
	t       *testing.T
	ctx     context.Context
	h       Harness[T]
	ek      func(string) string // suite key → event key
	filt    Filtered            // nil for a full sync
	version atomic.Int64
	want    map[string]int64 // event key → version, what the source holds
	lossy   *informertest.Lossy[T]
	log     *auditLog[T]
	inf     *core.SharedIndexInformer[T]
}

// newAuditRun reads what RunAudit's phases need from h: how it names keys
// in events and, for a partial sync, its filter.
func newAuditRun[T any](t *testing.T, ctx context.Context, h Harness[T]) *auditRun[T] {
	a := &auditRun[T]{t: t, ctx: ctx, h: h, ek: func(key string) string { return key }, want: map[string]int64{}}
	if m, ok := h.(KeyMapper); ok {
		a.ek = m.EventKey
	}
	a.filt, _ = h.(Filtered)
	return a
}

// put writes key at a version the filter keeps (any, unfiltered).
func (a *auditRun[T]) put(key string) (core.ResourceVersion, int64) {
	a.t.Helper()
	n := a.version.Add(1)
	for a.filt != nil && !a.filt.Matches(key, n) {
		n = a.version.Add(1)
	}
	rv, err := a.h.Put(a.ctx, key, n)
	if err != nil {
		a.t.Fatalf("Harness: put %q version %d: %v", key, n, err)
	}
	return rv, n
}

// putWant writes key (put) and records it in want; the lies' writes.
func (a *auditRun[T]) putWant(key string) core.ResourceVersion {
	rv, n := a.put(key)
	a.want[a.ek(key)] = n
	return rv
}

// auditName is the suite key of the i-th watched key.
func auditName(i int) string { return fmt.Sprintf("in.a-%d", i) }

// seed writes the keys the audits compare; for a partial sync also keys
// outside the filter, which must not count.
func (a *auditRun[T]) seed() {
	for i := range 12 {
		_, n := a.put(auditName(i))
		a.want[a.ek(auditName(i))] = n
	}
	if a.filt == nil {
		return
	}
	for i := range 4 {
		key := fmt.Sprintf("out.a-%d", i)
		n := a.version.Add(1)
		for a.filt.Matches(key, n) {
			n = a.version.Add(1)
		}
		if _, err := a.h.Put(a.ctx, key, n); err != nil {
			a.t.Fatalf("Harness: put %q: %v", key, err)
		}
	}
}

// start runs the audited informer over lw through a Lossy, so that the
// source's truth reaches only the audit.
func (a *auditRun[T]) start(lw driver.ListerWatcher[T]) {
	a.lossy = informertest.NewLossy[T](slowAudit[T]{lw}, informertest.LossyOptions[T]{})
	a.log = &auditLog[T]{version: a.h.Version}
	a.inf, _ = informertest.Run(a.t, driver.ListerWatcher[T](a.lossy), core.InformerOptions[T]{
		Name:  "audit",
		Audit: &core.AuditOptions[T]{Period: time.Hour, Pace: -1},
	}, a.log)
}

// waitRV waits until the informer has seen rv.
func (a *auditRun[T]) waitRV(rv core.ResourceVersion) {
	a.t.Helper()
	if err := a.inf.WaitFor(a.ctx, rv); err != nil {
		a.t.Fatalf("WaitFor(%d): %v", rv, err)
	}
}

// checkClean audits after a clean sync: equal, having read every watched
// key.
func (a *auditRun[T]) checkClean() {
	a.t.Helper()
	a.waitRV(a.putWant("in.a-0"))
	r := a.inf.AuditNow(a.ctx)
	if r.Outcome != core.AuditEqual || r.Divergent() != 0 {
		a.t.Fatalf("audit after a clean sync: %v, want equal", r)
	}
	if r.Rows < int64(len(a.want)) {
		a.t.Errorf("audit read %d rows, the source holds %d watched keys", r.Rows, len(a.want))
	}
}

// auditLies names the keys RunAudit lies about, by suite key.
type auditLies struct{ missing, extra, altered, stale, dropped string }

// lie makes the Lossy tell the informer five lies, each armed right before
// the write it lies about, and waits until the handler has heard them all.
func (a *auditRun[T]) lie() auditLies {
	a.t.Helper()
	lie := func(k informertest.LossKind, write func() core.ResourceVersion) {
		a.t.Helper()
		before := len(a.lossy.Losses())
		a.lossy.Arm(k)
		a.waitRV(write())
		if got := a.lossy.Losses(); len(got) != before+1 {
			a.t.Fatalf("lie %s was not told (losses %v)", k, got)
		}
	}
	l := auditLies{missing: auditName(20), extra: auditName(1), altered: auditName(2), stale: auditName(3), dropped: auditName(4)}
	lie(informertest.LossDrop, func() core.ResourceVersion { return a.putWant(l.missing) })
	lie(informertest.LossDrop, func() core.ResourceVersion {
		rv, err := a.h.Delete(a.ctx, l.extra)
		if err != nil {
			a.t.Fatalf("Harness: delete %q: %v", l.extra, err)
		}
		delete(a.want, a.ek(l.extra))
		return rv
	})
	lie(informertest.LossDrop, func() core.ResourceVersion { return a.putWant(l.dropped) })
	// Alter swaps in the previous change's object: another key's.
	lie(informertest.LossAlter, func() core.ResourceVersion { return a.putWant(l.altered) })
	prevStale := a.want[a.ek(l.stale)]
	lie(informertest.LossStale, func() core.ResourceVersion { return a.putWant(l.stale) })

	// The stale replay is the lies' last notification: once the handler
	// has it, it has every earlier one.
	last := fmt.Sprintf("update %s v=%d", a.ek(l.stale), prevStale)
	informertest.Eventually(a.t, "handler told of "+last, func() bool { return a.log.has(last) })
	return l
}

// checkHealed audits after the lies: exactly the five keys reported and
// healed, the cache then equal to the source, handlers told about those
// five keys only, and the next audit equal.
func (a *auditRun[T]) checkHealed(l auditLies) {
	a.t.Helper()
	t, ek := a.t, a.ek
	mark := a.log.mark()
	r := a.inf.AuditNow(a.ctx)
	if r.Outcome != core.AuditDivergent || r.Missing != 1 || r.Extra != 1 || r.Differing != 3 {
		t.Fatalf("audit after 5 lies (%v): %v, want 1 missing, 1 extra, 3 differing", a.lossy.Losses(), r)
	}
	if !slices.Equal(r.MissingKeys, []string{ek(l.missing)}) || !slices.Equal(r.ExtraKeys, []string{ek(l.extra)}) {
		t.Errorf("audit names missing %v and extra %v, want [%s] and [%s]", r.MissingKeys, r.ExtraKeys, ek(l.missing), ek(l.extra))
	}
	wantDiff := []string{ek(l.dropped), ek(l.altered), ek(l.stale)}
	slices.Sort(wantDiff)
	gotDiff := slices.Sorted(slices.Values(r.DifferingKeys))
	if !slices.Equal(gotDiff, wantDiff) {
		t.Errorf("audit names differing %v, want %v", gotDiff, wantDiff)
	}
	if r.Healed != 5 {
		t.Errorf("audit healed %d keys, want 5", r.Healed)
	}
	checkCache(t, a.inf, a.h.Version, a.want)
	a.checkHealedNotified(l, mark)
	if r = a.inf.AuditNow(a.ctx); r.Outcome != core.AuditEqual {
		t.Fatalf("audit after healing: %v, want equal", r)
	}
}

// checkHealedNotified checks that handlers hear about the five keys after
// mark, once each, with the source's state.
func (a *auditRun[T]) checkHealedNotified(l auditLies, mark int) {
	a.t.Helper()
	ek, want := a.ek, a.want
	healed := map[string]string{
		ek(l.missing): fmt.Sprintf("add %s v=%d", ek(l.missing), want[ek(l.missing)]),
		ek(l.extra):   "delete " + ek(l.extra),
		ek(l.dropped): fmt.Sprintf("update %s v=%d", ek(l.dropped), want[ek(l.dropped)]),
		ek(l.altered): fmt.Sprintf("update %s v=%d", ek(l.altered), want[ek(l.altered)]),
		ek(l.stale):   fmt.Sprintf("update %s v=%d", ek(l.stale), want[ek(l.stale)]),
	}
	informertest.Eventually(a.t, "handler told of 5 healed keys", func() bool { return len(a.log.since(mark)) >= 5 })
	got := a.log.since(mark)
	for _, line := range got {
		key := line.key
		if healed[key] != line.text {
			a.t.Errorf("handler got %q after the audit; the healed keys' notifications are %v", line.text, healed)
		}
		delete(healed, key)
	}
}

// checkNoFalsePositive audits while writers change keys during every
// audit: equal every time (changes after the audit's version are in
// flight).
func (a *auditRun[T]) checkNoFalsePositive() {
	a.t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() { a.write(w, stop) })
	}
	var inFlight int64
	for range 5 {
		r := a.inf.AuditNow(a.ctx)
		inFlight += r.InFlight
		if r.Outcome != core.AuditEqual {
			a.t.Errorf("audit under concurrent writes: %v, want equal", r)
		}
	}
	close(stop)
	wg.Wait()
	a.t.Logf("5 audits under concurrent writes: %d keys in flight in all", inFlight)
}

// write is concurrent writer w of checkNoFalsePositive: it puts and
// deletes its five keys until stop is closed.
func (a *auditRun[T]) write(w int, stop <-chan struct{}) {
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
			if _, err := a.h.Delete(a.ctx, key); err != nil {
				a.t.Errorf("Harness: delete %q: %v", key, err)
				return
			}
			continue
		}
		n := a.version.Add(1)
		for a.filt != nil && !a.filt.Matches(key, n) {
			n = a.version.Add(1)
		}
		if _, err := a.h.Put(a.ctx, key, n); err != nil {
			a.t.Errorf("Harness: put %q: %v", key, err)
			return
		}
	}
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
type slowAudit[T any] struct{ driver.ListerWatcher[T] }

func (s slowAudit[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	al, _ := driver.Capability[driver.AuditLister[T]](s.ListerWatcher)
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[T]) error {
		time.Sleep(time.Millisecond)
		return emit(ev)
	}
	return al.AuditList(ctx, atLeast, sink)
}
