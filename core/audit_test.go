package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
)

// keyLog records which keys a handler is told about.
type keyLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *keyLog) add(k string) { l.mu.Lock(); l.keys = append(l.keys, k); l.mu.Unlock() }
func (l *keyLog) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.keys[n:])
}
func (l *keyLog) len() int                               { l.mu.Lock(); defer l.mu.Unlock(); return len(l.keys) }
func (l *keyLog) OnAdd(k string, _ versioned, _ bool)    { l.add(k) }
func (l *keyLog) OnUpdate(k string, _, _ versioned)      { l.add(k) }
func (l *keyLog) OnDelete(k string, _ versioned, _ bool) { l.add(k) }

// cacheDiff returns the keys whose cached object differs from want.
func cacheDiff(inf *core.SharedIndexInformer[versioned], want map[string]versioned) []string {
	var diff []string
	got := map[string]versioned{}
	inf.Indexer().Range(func(k string, v versioned) bool { got[k] = v; return true })
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			diff = append(diff, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diff = append(diff, k)
		}
	}
	slices.Sort(diff)
	return diff
}

// A seeded Lossy lies at random about a fifth of 300 changes; the periodic
// audit (fired by the fake clock) reports exactly the keys the cache got
// wrong, logs them at Warn, heals them, and handlers hear of those keys
// only.
func TestAuditFindsSeededLies(t *testing.T) {
	for n := range uint64(10) {
		seed, deltaFIFO := n/2, n%2 == 1
		t.Run(fmt.Sprintf("seed=%d/DeltaFIFO=%v", seed, deltaFIFO), func(t *testing.T) {
			src := memory.New[versioned](memory.Options{MaxBatch: 4})
			lossy := informertest.NewLossy[versioned](src, informertest.LossyOptions[versioned]{Seed: seed, Rate: 0.2})
			fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			results := make(chan core.AuditResult, 10)
			var logBuf bytes.Buffer
			var logMu sync.Mutex
			log := &keyLog{}
			inf, _ := informertest.Run[versioned](t, lossy, core.InformerOptions[versioned]{
				Clock:     fc,
				DeltaFIFO: deltaFIFO,
				Logger:    slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logBuf}, nil)),
				Audit: &core.AuditOptions[versioned]{
					Period:   time.Minute,
					OnResult: func(r core.AuditResult) { results <- r },
				},
			})
			reg, err := inf.AddEventHandler(log)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(seed, 7))
			var last core.ResourceVersion
			for i := range 300 {
				k := fmt.Sprintf("k%02d", rng.IntN(30))
				if rng.IntN(5) == 0 {
					if rv, ok := src.Delete(k); ok {
						last = rv
					}
					continue
				}
				last = src.Put(k, versioned{Key: k, V: i})
			}
			pump(t, fc, "the last write", func() bool { return inf.AppliedVersion() >= last })
			want, _ := src.Items()
			wrong := cacheDiff(inf, want)
			if len(lossy.Losses()) == 0 || len(wrong) == 0 {
				t.Fatalf("seed %d: %d lies, %d wrong keys: the test proves nothing", seed, len(lossy.Losses()), len(wrong))
			}
			// Every notification of the writes delivered: what the log
			// gets from now on is the audit's.
			informertest.Eventually(t, "handler idle", func() bool { return reg.Pending() == 0 })
			mark := log.len()
			var r core.AuditResult
			pump(t, fc, "the periodic audit", func() bool {
				select {
				case r = <-results:
					return true
				default:
					return false
				}
			})
			var named []string
			named = append(append(append(named, r.MissingKeys...), r.ExtraKeys...), r.DifferingKeys...)
			slices.Sort(named)
			if r.Outcome != core.AuditDivergent || r.Divergent() != int64(len(wrong)) || r.Healed != int64(len(wrong)) || r.InFlight != 0 {
				t.Fatalf("audit: %v; the cache had %d keys wrong: %v", r, len(wrong), wrong)
			}
			if len(wrong) <= core.AuditKeyLimit && !slices.Equal(named, wrong) {
				t.Errorf("audit names %v, the wrong keys are %v", named, wrong)
			}
			if d := cacheDiff(inf, want); len(d) != 0 {
				t.Errorf("after healing the cache still differs at %v", d)
			}
			informertest.Eventually(t, "handlers told of the healed keys", func() bool { return log.len()-mark >= len(wrong) })
			told := log.since(mark)
			slices.Sort(told)
			if !slices.Equal(told, wrong) {
				t.Errorf("handlers were told of %v after the audit, the healed keys are %v", told, wrong)
			}
			logMu.Lock()
			line := logBuf.String()
			logMu.Unlock()
			if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "cache differs from the source") {
				t.Errorf("no Warn line for the divergence:\n%s", line)
			}
			if st := inf.SyncStatus(); st.Audit == nil || st.Audit.Version != r.Version {
				t.Errorf("SyncStatus.Audit = %v, want the run at %d", st.Audit, r.Version)
			}
		})
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// hidden hides every capability of the source it keeps in a named field.
type hidden struct {
	lw driver.ListerWatcher[versioned]
}

func (h hidden) List(ctx context.Context, s driver.ListSink[versioned]) (core.ResourceVersion, error) {
	return h.lw.List(ctx, s)
}
func (h hidden) Watch(ctx context.Context, from core.ResourceVersion, o driver.WatchOptions[versioned]) error {
	return h.lw.Watch(ctx, from, o)
}

// An audit never panics and never stops the informer: a source that cannot
// be audited and an Equal that panics are failed runs that say why.
func TestAuditFailsSafely(t *testing.T) {
	src := memory.New[versioned](memory.Options{})
	src.Put("a", versioned{Key: "a", V: 1})
	ctx := context.Background()

	inf, _ := informertest.Run[versioned](t, hidden{src}, core.InformerOptions[versioned]{})
	if r := inf.AuditNow(ctx); r.Outcome != core.AuditFailed || !errors.Is(r.Err, core.ErrAuditUnsupported) {
		t.Errorf("audit of a source without AuditList: %v", r)
	}

	inf, _ = informertest.Run[versioned](t, driver.ListerWatcher[versioned](src), core.InformerOptions[versioned]{
		Audit: &core.AuditOptions[versioned]{Equal: func(a, b versioned) bool { panic("bug in Equal") }},
	})
	if r := inf.AuditNow(ctx); r.Outcome != core.AuditFailed || !strings.Contains(r.Err.Error(), "bug in Equal") {
		t.Errorf("audit with an Equal that panics: %v", r)
	}
	rv := src.Put("b", versioned{Key: "b", V: 2})
	if err := inf.WaitFor(ctx, rv); err != nil || !inf.Live() {
		t.Errorf("the informer after a failed audit: WaitFor %v, live %v", err, inf.Live())
	}
}

// Pace spaces the audit's reads: 640 rows at 100 a second take 6.4s of
// the informer's clock (a fake one here, stepped until the run ends).
func TestAuditPace(t *testing.T) {
	src := memory.New[versioned](memory.Options{})
	want := map[string]versioned{}
	for i := range 640 {
		k := fmt.Sprintf("k%03d", i)
		want[k] = versioned{Key: k, V: i}
		src.Put(k, want[k])
	}
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	inf, _ := informertest.Run[versioned](t, driver.ListerWatcher[versioned](src), core.InformerOptions[versioned]{
		Clock: fc,
		Audit: &core.AuditOptions[versioned]{Pace: 100},
	})
	// Synced comes a moment before the list's end is recorded, and an
	// audit refuses to run beside a list (make test once saw it refuse:
	// the loop below then waited for rows that never came).
	informertest.Eventually(t, "the initial list has ended", func() bool { return inf.SyncStatus().ListStarted.IsZero() })
	done := make(chan core.AuditResult, 1)
	go func() { done <- inf.AuditNow(context.Background()) }()
	var r core.AuditResult
	deadline := time.Now().Add(informertest.Timeout)
	for r.Rows == 0 {
		select {
		case r = <-done:
			continue
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the paced audit did not end")
		}
		if fc.HasWaiters() {
			fc.Step(100 * time.Millisecond)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if r.Outcome != core.AuditEqual || r.Rows != 640 || r.Duration < 6300*time.Millisecond {
		t.Errorf("paced audit: %v (%v on the informer's clock), want equal, 640 rows, at least 6.3s", r, r.Duration)
	}
	if len(want) != inf.Indexer().Len() {
		t.Errorf("cache holds %d keys, want %d", inf.Indexer().Len(), len(want))
	}
}

// HealRelist makes the informer relist: the cache equals the source again
// and the next audit finds it equal.
func TestAuditHealRelist(t *testing.T) {
	src := memory.New[versioned](memory.Options{})
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		src.Put(k, versioned{Key: k, V: i})
	}
	lossy := informertest.NewLossy[versioned](src, informertest.LossyOptions[versioned]{})
	spy := informertest.Wrap[versioned](lossy)
	inf, _ := informertest.Run[versioned](t, spy, core.InformerOptions[versioned]{
		Backoff: core.Backoff{Initial: time.Millisecond, Max: time.Millisecond},
		Audit:   &core.AuditOptions[versioned]{Heal: core.HealRelist},
	})
	ctx := context.Background()
	lossy.Arm(informertest.LossDrop)
	rv := src.Put("k3", versioned{Key: "k3", V: 100})
	if err := inf.WaitFor(ctx, rv); err != nil {
		t.Fatal(err)
	}
	if r := inf.AuditNow(ctx); r.Differing != 1 || r.Healed != 1 {
		t.Fatalf("audit: %v", r)
	}
	informertest.Eventually(t, "a relist", func() bool { return spy.Lists() >= 2 })
	want, head := src.Items()
	if err := inf.WaitFor(ctx, head); err != nil {
		t.Fatal(err)
	}
	if d := cacheDiff(inf, want); len(d) != 0 {
		t.Errorf("after the relist the cache differs at %v", d)
	}
	if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual {
		t.Errorf("audit after the relist: %v", r)
	}
}

// auditHook calls after once the source's read returned, before the audit
// compares.
type auditHook struct {
	*informertest.Spy[versioned]
	src   *memory.Source[versioned]
	after func()
}

func (h *auditHook) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[versioned]) (core.ResourceVersion, error) {
	c, err := h.src.AuditList(ctx, atLeast, sink)
	if err == nil && h.after != nil {
		h.after()
	}
	return c, err
}

// A relist that lands past the audit's version C while the audit runs
// moves the cache from a state before C to one after it: a key created
// before C and deleted after it, which the watch never delivered (it was
// down), is absent from the cache and never touched, yet it is no
// divergence. Found by the reliability suite (postgres-filtered seed 3: a
// cut, then a temporary slot's relist, with the workload writing).
func TestAuditRelistPastItsVersion(t *testing.T) {
	src := memory.New[versioned](memory.Options{})
	src.Put("a", versioned{Key: "a", V: 1})
	spy := informertest.Wrap[versioned](src)
	hook := &auditHook{Spy: spy, src: src}
	inf, _ := informertest.Run[versioned](t, hook, core.InformerOptions[versioned]{
		Audit: &core.AuditOptions[versioned]{Heal: core.HealReportOnly},
	})
	ctx := context.Background()

	// The watch is down: the cache does not see k created.
	gate := spy.HoldWatches()
	spy.Break(errors.New("connection cut"))
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	src.Put("k", versioned{Key: "k", V: 2})
	// The audit reads k at C; then k is deleted, the watch's position
	// expires and the informer relists past C, without k.
	var deleted core.ResourceVersion
	hook.after = func() {
		deleted, _ = src.Delete("k")
		if err := src.Compact(deleted); err != nil {
			t.Error(err)
		}
		gate.Release()
	}
	r := inf.AuditNow(ctx)
	if r.Outcome != core.AuditEqual || r.InFlight != 1 {
		t.Errorf("audit overtaken by a relist: %v, want equal with k in flight", r)
	}
	if err := inf.WaitFor(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	if d := cacheDiff(inf, map[string]versioned{"a": {Key: "a", V: 1}}); d != nil {
		t.Errorf("cache differs at %v", d)
	}
	// With the watch up again, the next run compares everything.
	if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual || r.InFlight != 0 {
		t.Errorf("audit after the relist: %v", r)
	}
}

// A cache filed from a list of thousands of keys (a base, whose positions
// the audit marks its seen keys by) and written since (deletes in the
// base, new keys in the map beside it): a seeded Lossy lies about some of
// the writes, and one audit names exactly the keys the cache got wrong
// and heals them.
func TestAuditFiledCache(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			src := memory.New[versioned](memory.Options{MaxBatch: 16})
			for i := range 6000 {
				k := fmt.Sprintf("k%04d", i)
				src.Put(k, versioned{Key: k, V: i})
			}
			lossy := informertest.NewLossy[versioned](src, informertest.LossyOptions[versioned]{Seed: seed, Rate: 0.1})
			inf, _ := informertest.Run[versioned](t, lossy, core.InformerOptions[versioned]{})
			rng := rand.New(rand.NewPCG(seed, 11))
			var last core.ResourceVersion
			for i := range 600 {
				k := fmt.Sprintf("k%04d", rng.IntN(7000))
				if rng.IntN(3) == 0 {
					if rv, ok := src.Delete(k); ok {
						last = rv
					}
					continue
				}
				last = src.Put(k, versioned{Key: k, V: 10000 + i})
			}
			ctx := context.Background()
			if err := inf.WaitFor(ctx, last); err != nil {
				t.Fatal(err)
			}
			want, _ := src.Items()
			wrong := cacheDiff(inf, want)
			if len(wrong) == 0 {
				t.Fatal("no wrong key: the test proves nothing")
			}
			r := inf.AuditNow(ctx)
			if r.Outcome != core.AuditDivergent || r.Divergent() != int64(len(wrong)) || r.Healed != int64(len(wrong)) || r.InFlight != 0 || r.Rows != int64(len(want)) {
				t.Fatalf("audit: %v; the cache had %d keys wrong: %v", r, len(wrong), wrong)
			}
			if d := cacheDiff(inf, want); len(d) != 0 {
				t.Errorf("after healing the cache still differs at %v", d)
			}
			if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual {
				t.Errorf("second audit: %v", r)
			}
		})
	}
}
