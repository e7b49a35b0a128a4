package core

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/dbinformer/dbinformer/core/driver"
)

// How a run works (see AuditOptions). The cache is not frozen and the
// source is read as it streams, so the run compares in two steps:
//
//  1. Before the read, the informer starts recording every key it applies
//     a change to, with the change's version (changeRecord.touch, called in
//     handleDeltas under the cache's write lock). While the source
//     streams its snapshot at C, each row is compared with the cache as it
//     is then; rows that agree are done, rows that do not are kept (key
//     and source object) as suspects: the cache may merely lag behind C.
//     Each row's key goes into a set of seen keys (auditSeen: a bit at
//     the key's position in the cache's base, or a hash).
//  2. Once the read returned C, the run waits for the cache to apply C.
//     Every change up to C is then in the cache, so a key the cache has
//     not changed since with a version after C holds its state at C: a
//     suspect still differing is a divergence, and a cached key not seen
//     is extra. A key changed after C is in flight and left out.
//
// A relist that completes past C while the run reads moves the cache from
// a state before C to one after it without ever holding C's: every key it
// lists or deletes is recorded (in flight), but a key the source created
// before C and deleted after it, that the watch never delivered, is in
// neither the cache nor the record. So when a list past C completed, a
// key missing from the cache is in flight too: the run cannot tell it
// from a loss, and the next run (without a relist) will.
//
// Memory beyond the cache is the suspects (the keys in flight and the
// divergent ones), the recorded keys (changed during the run) and the seen
// set: a bit per key of the cache's base, a 64-bit hash per other key
// (two keys of a million share one with odds of about 1 in 3·10⁷, and then
// an extra key can go unseen: a collision can hide a divergence from one
// run, never report a false one).

// touchDelta records d for a running audit; called under the cache's
// write lock before d is applied.
func touchDelta[T any](t *changeRecord, d *Delta[T]) {
	if t == nil || d.Type == DeltaSync {
		return
	}
	rv := d.RV
	if d.Type == DeltaReplaced || rv == 0 {
		rv = unknownRV
	}
	t.touch(d.Key, rv)
}

func (i *SharedIndexInformer[T]) auditOptions() AuditOptions[T] {
	var o AuditOptions[T]
	if i.opts.Audit != nil {
		o = *i.opts.Audit
	}
	if o.Period <= 0 {
		o.Period = 10 * time.Minute
	}
	if o.Pace == 0 {
		o.Pace = 10000
	}
	if o.MaxHeal <= 0 {
		o.MaxHeal = 10000
	}
	return o
}

// auditLoop runs the audit every period while the informer runs.
func (i *SharedIndexInformer[T]) auditLoop(ctx context.Context) {
	o := i.auditOptions()
	select {
	case <-i.syncedCh:
	case <-ctx.Done():
		return
	}
	for {
		d := o.Period + time.Duration(rand.Int64N(int64(o.Period)/5+1))
		t := i.clk.NewTimer(d)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return
		}
		i.audit(ctx, o)
	}
}

// audit runs once and reports the result.
func (i *SharedIndexInformer[T]) audit(ctx context.Context, o AuditOptions[T]) AuditResult {
	i.auditMu.Lock()
	defer i.auditMu.Unlock()
	if o.Equal == nil {
		o.Equal = deepEqual[T]() // this run's own: one run at a time uses it
	}
	r := i.auditRun(ctx, o)
	i.lastAudit.Store(&r)
	if m, ok := i.met.(AuditMetrics); ok {
		m.Audited(r)
	}
	i.logAudit(ctx, r)
	if o.OnResult != nil {
		o.OnResult(r)
	}
	return r
}

func (i *SharedIndexInformer[T]) logAudit(ctx context.Context, r AuditResult) {
	lg := i.rep.logger
	switch r.Outcome {
	case AuditDivergent:
		lg.LogAttrs(ctx, slog.LevelWarn, "dbinformer: cache differs from the source", slog.String("source", i.name),
			slog.Uint64("version", uint64(r.Version)), slog.Int64("missing", r.Missing), slog.Int64("extra", r.Extra),
			slog.Int64("differing", r.Differing), slog.Any("missing_keys", r.MissingKeys), slog.Any("extra_keys", r.ExtraKeys),
			slog.Any("differing_keys", r.DifferingKeys), slog.Int64("healed", r.Healed), slog.Int64("in_flight", r.InFlight),
			slog.Int64("rows", r.Rows), slog.Duration("duration", r.Duration))
	case AuditFailed:
		if ctx.Err() == nil {
			lg.LogAttrs(ctx, slog.LevelWarn, "dbinformer: audit failed", slog.String("source", i.name), slog.Any("err", r.Err))
		}
	default:
		lg.LogAttrs(ctx, slog.LevelDebug, "dbinformer: audit", slog.String("source", i.name), slog.String("result", r.String()))
	}
}

// auditRun is one run, in the two steps the top of this file describes:
// the source's read (auditPass.read), then, once the cache has applied its
// version (auditWaitFor), the comparison and the healing. A panic fails
// the run, not the informer.
func (i *SharedIndexInformer[T]) auditRun(ctx context.Context, o AuditOptions[T]) (r AuditResult) {
	r.Started = i.clk.Now()
	defer func() {
		if p := recover(); p != nil {
			r = AuditResult{Outcome: AuditFailed, Started: r.Started, Err: fmt.Errorf("%s: audit panicked: %v", i.name, p)}
		}
		r.Duration = i.clk.Since(r.Started)
	}()
	fail := func(err error) AuditResult {
		r.Outcome, r.Err = AuditFailed, err
		return r
	}
	al, ok := driver.Capability[driver.AuditLister[T]](i.lw)
	if !ok {
		return fail(fmt.Errorf("%s: %w", i.name, ErrAuditUnsupported))
	}
	tr := newChangeRecord()
	// Set before reading the version received: a change applied without
	// being recorded (its batch began before the store) was received
	// before, so its version is at most a0, and the source's snapshot
	// (at least a0) holds it.
	i.auditTr.Store(tr)
	defer i.auditTr.Store(nil)
	a0 := max(i.queue.AppliedVersion(), i.LastSyncResourceVersion())
	// A list running now may have handed objects at its own version (not
	// yet known) to a batch applied without the record: its run cannot
	// be compared. One that starts later is recorded (a relisted key is
	// always in flight).
	if st := i.SyncStatus(); !st.ListStarted.IsZero() {
		return fail(fmt.Errorf("%s: audit: a list is running (started %v); the next period audits", i.name, st.ListStarted.Format(time.RFC3339)))
	}

	p := &auditPass[T]{i: i, o: o, r: &r, tr: tr, seen: newAuditSeen[T](), suspects: map[string]auditSuspect[T]{}, gone: map[string]struct{}{}}
	i.indexer.watchSeen(p.seen)
	defer i.indexer.watchSeen(nil)
	c, err := p.read(ctx, al, a0)
	r.Version = c
	if err != nil {
		return fail(fmt.Errorf("%s: audit: read the source: %w", i.name, err))
	}
	if c < a0 {
		return fail(fmt.Errorf("%s: audit: the source's snapshot at version %d is older than the cache (version %d); a source that lags must refuse it", i.name, c, a0))
	}
	if err := i.auditWaitFor(ctx, c, o.Period); err != nil {
		return fail(fmt.Errorf("%s: audit: the cache did not reach the source's version %d: %w", i.name, c, err))
	}
	i.mu.Lock()
	rf := i.reflector
	i.mu.Unlock()
	// Read after WaitFor: a list that completed past c did so during the
	// run (one before it had a version at most a0).
	relisted := rf != nil && ResourceVersion(rf.lastListRV.Load()) > c
	rc, _ := driver.Capability[driver.AuditRechecker](i.lw)
	heal, err := p.compare(ctx, c, relisted, rc)
	if err != nil {
		return fail(fmt.Errorf("%s: audit: %w", i.name, err))
	}
	r.Outcome = AuditEqual
	if r.Divergent() > 0 {
		r.Outcome = AuditDivergent
		switch o.Heal {
		case HealKeys:
			r.Healed = i.auditHeal(tr, c, heal)
		case HealRelist:
			if rf != nil {
				rf.requestRelist()
				r.Healed = r.Divergent()
			}
		}
	}
	return r
}

// read is the run's step 1: it streams the source's snapshot (at a0 or
// later) into emit at the audit's pace, and returns the snapshot's
// version C.
func (p *auditPass[T]) read(ctx context.Context, al driver.AuditLister[T], a0 ResourceVersion) (ResourceVersion, error) {
	i := p.i
	pace := newPacer(i, p.o.Pace)
	return al.AuditList(ctx, a0, driver.ListSink[T]{
		Emit: func(ev driver.Event[T]) error {
			p.r.Rows++
			if err := pace.wait(ctx); err != nil {
				return err
			}
			return p.emit(ev)
		},
		// Sized once for the keys outside the cache's base: grown by
		// appends it would hold up to twice the rows.
		Estimate: func(n int64) {
			if h := &p.seen.hashes.h; len(*h) == 0 && n > 0 {
				if m := int64(i.indexer.auditUnseenLen()); m > 0 {
					*h = make([]uint64, 0, min(n, m, 1<<26))
				}
			}
		},
	})
}

// auditWaitFor waits for the cache to apply c, the version the source's
// snapshot was read at: the run's step 2 compares only a cache that holds
// every change up to c.
func (i *SharedIndexInformer[T]) auditWaitFor(ctx context.Context, c ResourceVersion, period time.Duration) error {
	// The wait is bounded by the period: a cache that cannot reach C in
	// that long is not compared (the sync status says why it lags).
	wctx, cancel := context.WithTimeout(ctx, period)
	defer cancel()
	// The run's one bookmark request goes out now, not after what is left
	// of ProgressRequestInterval since a WaitFor of the application's (or
	// the last run's) asked: that wait, up to 250 ms by default, was
	// longer than the read of an unpaced audit of 100k Postgres rows.
	i.progMu.Lock()
	i.lastReq = time.Time{}
	i.progMu.Unlock()
	return i.WaitFor(wctx, c)
}

// auditPass is one run's comparison (see the top of this file).
type auditPass[T any] struct {
	i    *SharedIndexInformer[T]
	o    AuditOptions[T]
	r    *AuditResult
	tr   *changeRecord
	seen *auditSeen[T] // each row's key
	// suspects are keyed, since a source may emit a key again (see
	// driver.AuditLister): its last emission stands.
	suspects map[string]auditSuspect[T]
	gone     map[string]struct{}
	heal     []Delta[T]
}

// emit compares one row of the source's read with the cache as it is.
func (p *auditPass[T]) emit(ev driver.Event[T]) error {
	delete(p.suspects, ev.Key)
	if ev.Type == driver.Deleted {
		// Absent at C, after an earlier emission maybe: kept by name
		// (few keys: those the source changed while it was read), so
		// that a hash shared with another key never makes that one look
		// absent.
		p.gone[ev.Key] = struct{}{}
		return nil
	}
	delete(p.gone, ev.Key)
	if ev.Err != nil || !ev.HasObject {
		p.seen.addKey(ev.Key)
		p.r.Undecodable++
		return nil
	}
	obj := ev.Object
	if p.i.opts.Transform != nil {
		var err error
		if obj, err = p.i.reflectorTransform(obj); err != nil {
			p.seen.addKey(ev.Key)
			p.r.Undecodable++
			return nil
		}
	}
	if cached, ok := p.i.indexer.auditGet(ev.Key, p.seen); ok {
		same, err := safeEqual(p.o.Equal, cached, obj)
		if err != nil {
			return err
		}
		if same {
			p.r.Compared++
			return nil
		}
	}
	p.suspects[ev.Key] = auditSuspect[T]{obj: obj, rv: ev.RV}
	return nil
}

// auditSuspect is a source object that differed from the cache as it was
// read, and its version (for driver.AuditRechecker).
type auditSuspect[T any] struct {
	obj T
	rv  ResourceVersion
}

// compare decides, once the cache has applied c, which suspects differ
// and which cached keys the source did not have, and returns what heals
// them (at most MaxHeal). relisted says that a list past c completed
// during the run: a key missing from the cache is then in flight (see the
// top of this file). rc, when the source has one, rechecks each missing
// or differing key first (see driver.AuditRechecker); an extra key needs no
// recheck, as a change without a version only removes.
func (p *auditPass[T]) compare(ctx context.Context, c ResourceVersion, relisted bool, rc driver.AuditRechecker) ([]Delta[T], error) {
	r, i := p.r, p.i
	add := func(keys *[]string, n *int64, d Delta[T]) {
		*n++
		if len(*keys) < AuditKeyLimit {
			*keys = append(*keys, d.Key)
		}
		if len(p.heal) < p.o.MaxHeal {
			p.heal = append(p.heal, d)
		}
	}
	asked := 0
	for key, s := range p.suspects {
		// Read the cache before asking the track: a change is recorded
		// before it is applied, so a cached state read first and not
		// recorded after C is the state at C.
		cached, ok := i.indexer.Get(key)
		var keys *[]string
		var n *int64
		d := Delta[T]{Key: key, Object: s.obj, HasObject: true, RV: c}
		switch {
		case p.tr.after(key, c), !ok && relisted:
			r.InFlight++
			continue
		case !ok:
			keys, n, d.Type = &r.MissingKeys, &r.Missing, DeltaAdded
		case !p.o.Equal(cached, s.obj):
			keys, n, d.Type = &r.DifferingKeys, &r.Differing, DeltaUpdated
		default:
			r.Compared++
			continue
		}
		if rc != nil && asked < p.o.MaxHeal {
			asked++
			same, err := rc.AuditUnchanged(ctx, key, s.rv)
			if err != nil {
				return nil, fmt.Errorf("recheck key %q at version %d: %w", key, s.rv, err)
			}
			if !same {
				r.InFlight++ // dropped or changed after C without the cache seeing it yet
				continue
			}
		}
		add(keys, n, d)
	}
	p.suspects = nil
	// Detached, the set changes no more (but in auditUnseen, if the base
	// was replaced since): sorted here, outside the cache's lock.
	i.indexer.watchSeen(nil)
	p.seen.hashes.seal()
	var extra []string
	i.indexer.auditUnseen(p.seen, func(k string) {
		if _, g := p.gone[k]; !g {
			extra = append(extra, k)
		}
	})
	// A key whose last emission said absent at C is not seen, even if an
	// earlier one marked it.
	for k := range p.gone {
		if _, ok := i.indexer.Get(k); ok {
			extra = append(extra, k)
		}
	}
	for _, k := range extra {
		_, ok := i.indexer.Get(k)
		switch {
		case p.tr.after(k, c):
			r.InFlight++
		case ok:
			add(&r.ExtraKeys, &r.Extra, Delta[T]{Type: DeltaDeleted, Key: k, FinalStateUnknown: true, RV: c})
		}
	}
	return p.heal, nil
}

// safeEqual runs the user's Equal; a panic is an error that ends the
// source's read cleanly rather than unwinding through the adapter.
func safeEqual[T any](eq func(a, b T) bool, a, b T) (same bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("AuditOptions.Equal panicked: %v", p)
		}
	}()
	return eq(a, b), nil
}

// reflectorTransform runs InformerOptions.Transform as the reflector does
// (a panic is an error).
func (i *SharedIndexInformer[T]) reflectorTransform(obj T) (out T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("transform panicked: %v", p)
		}
	}()
	return i.opts.Transform(obj)
}

// auditHeal applies the source's state at c of the divergent keys, as
// handleDeltas applies changes, except for a key changed after c since
// (the watch has its newer state). It holds handleMu for writing so that
// handlers get its notifications in order with the watch's.
func (i *SharedIndexInformer[T]) auditHeal(tr *changeRecord, c ResourceVersion, heal []Delta[T]) int64 {
	if len(heal) == 0 {
		return 0
	}
	i.handleMu.Lock()
	defer i.handleMu.Unlock()
	var notes []notification[T]
	var errs []error
	var healed int64
	i.indexer.update(func(tx indexTx[T]) {
		for k := range heal {
			d := &heal[k]
			if tr.after(d.Key, c) {
				continue
			}
			if d.Type == DeltaDeleted {
				old, existed, err := tx.delete(d.Key)
				if err != nil {
					errs = append(errs, i.deltaError(d, err))
				}
				if existed {
					healed++
					notes = append(notes, notification[T]{kind: noteDelete, flag: true, key: d.Key, obj: old})
				}
				continue
			}
			old, existed, err := tx.put(d.Key, d.Object)
			if err != nil {
				errs = append(errs, i.deltaError(d, err))
				continue
			}
			healed++
			if existed {
				notes = append(notes, notification[T]{kind: noteUpdate, key: d.Key, old: old, obj: d.Object})
			} else {
				notes = append(notes, notification[T]{kind: noteAdd, key: d.Key, obj: d.Object})
			}
		}
	})
	for _, err := range errs {
		i.rep.report(context.Background(), err)
	}
	if len(notes) > 0 {
		for _, l := range i.listeners {
			l.add(notes)
		}
	}
	return healed
}
