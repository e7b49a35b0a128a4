package conformance

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

const (
	concWriters = 3
	concKeys    = 3  // keys per writer
	concOps     = 24 // puts per writer at least, then one delete
	// concMaxOps bounds the puts of a writer that keeps going while a slow
	// List runs.
	concMaxOps = 2000
)

// keyOp is one write of a concurrent writer to one of its keys.
type keyOp struct {
	n     int64 // version; for a delete, the last version
	del   bool
	rv    core.ResourceVersion
	after core.ResourceVersion // RV of the same writer's previous write
}

// listConsistentUnderWrites lists (twice) while several writers change
// their own keys, then checks that each listed key is at a version
// consistent with the List's RV, and that the watch from that RV folds the
// listed state into the final state with every later write exactly once
// and in per-key order.
func listConsistentUnderWrites[T any](e *env[T]) {
	total := concWriters * (concOps + 1)
	// The lister waits for these counts of completed writes, so that each
	// List overlaps writes still to come.
	c := &concWrites{
		milestones: []*milestone{newMilestone(total / 5), newMilestone(total * 3 / 5)},
		ops:        make([][][]keyOp, concWriters), // writer, key, ops
		errs:       make([]error, concWriters),
	}
	defer c.listed.Store(true) // also when a failed List ends the case
	for w := range concWriters {
		for k := range concKeys {
			e.eventKey(concKey(w, k)) // the writers must not touch e
		}
	}
	var wg sync.WaitGroup
	for w := range concWriters {
		c.ops[w] = make([][]keyOp, concKeys)
		wg.Go(func() { concWrite(e, c, w) })
	}

	type listing struct {
		got map[string]int64
		rv  core.ResourceVersion
		r   *reader[T]
	}
	var lists []listing
	for _, m := range c.milestones {
		<-m.ch
		got, rv := e.list()
		lists = append(lists, listing{got, rv, e.watch(rv, 0)})
	}
	c.listed.Store(true)
	wg.Wait()
	for _, err := range c.errs {
		if err != nil {
			e.t.Fatalf("%v", err)
		}
	}

	for i, l := range lists {
		e.t.Logf("List %d at RV %d returned %d keys", i, l.rv, len(l.got))
		if !checkConcurrentList(e, c.ops, l.got, l.rv, l.r) {
			return
		}
	}
	// Anything still pending on the watches (a repeated event) would come
	// before the sentinel's event.
	w := e.put("end-concurrent", 1)
	for _, l := range lists {
		ev, err := l.r.nextChange()
		if err != nil {
			e.t.Errorf("Watch(%d): waiting for the event of %s: %v", l.rv, w, err)
			continue
		}
		if ev.Key != e.eventKey(w.key) {
			e.t.Errorf("Watch(%d): after every write was delivered, got %s; want only the event of %s", l.rv, describe(e, ev), w)
		}
	}
}

// concWrites is what listConsistentUnderWrites shares with its writers:
// when to List, and what each writer wrote (or why it stopped).
type concWrites struct {
	milestones []*milestone
	done       atomic.Int64
	// Writers go on until both Lists returned, so that even a source that
	// writes faster than the lister gets going has writes racing each List.
	listed atomic.Bool
	ops    [][][]keyOp // writer, key, ops
	errs   []error     // by writer
}

// reached counts one completed write and releases the milestones it
// reaches.
func (c *concWrites) reached() {
	n := c.done.Add(1)
	for _, m := range c.milestones {
		if n >= m.at {
			m.release()
		}
	}
}

// concWrite is writer w of listConsistentUnderWrites: it puts its keys in
// turn, recording each write in c.ops[w], until the Lists are done (or
// concMaxOps), then deletes key 0.
func concWrite[T any](e *env[T], c *concWrites, w int) {
	// A writer that stops early must not leave the lister waiting.
	defer func() {
		if c.errs[w] != nil {
			for _, m := range c.milestones {
				m.release()
			}
		}
	}()
	ops := c.ops[w]
	var prev core.ResourceVersion
	for i := 0; ; i++ {
		last := i >= concMaxOps || (i >= concOps && c.listed.Load())
		k := i % concKeys
		key := concKey(w, k)
		ctx, cancel := e.opCtx()
		var rv core.ResourceVersion
		var err error
		op := keyOp{n: int64(i + 1), after: prev}
		if last {
			// The last op deletes key 0, so both a deleted key and
			// an absent-before-creation key are in play.
			k, key = 0, concKey(w, 0)
			op.del = true
			op.n = ops[0][len(ops[0])-1].n
			rv, err = e.h.Delete(ctx, key)
		} else {
			rv, err = e.h.Put(ctx, key, int64(i+1))
		}
		cancel()
		if err != nil {
			c.errs[w] = fmt.Errorf("writer %d: write %d to %q: %w", w, i, key, err)
			return
		}
		if rv <= prev {
			c.errs[w] = fmt.Errorf("writer %d: write %d to %q returned RV %d, not after its previous write's RV %d", w, i, key, rv, prev)
			return
		}
		op.rv, prev = rv, rv
		ops[k] = append(ops[k], op)
		c.reached()
		if last {
			return
		}
	}
}

type milestone struct {
	at   int64
	ch   chan struct{}
	once sync.Once
}

func newMilestone(at int) *milestone { return &milestone{at: int64(at), ch: make(chan struct{})} }

func (m *milestone) release() { m.once.Do(func() { close(m.ch) }) }

func concKey(w, k int) string { return fmt.Sprintf("w%d-k%d", w, k) }

// checkConcurrentList checks one List against the writers' ops and folds
// its watch to the final state.
func checkConcurrentList[T any](e *env[T], ops [][][]keyOp, got map[string]int64, rv core.ResourceVersion, r *reader[T]) bool {
	e.t.Helper()
	pos, seqs, ok := listedPositions(e, ops, got, rv)
	if !ok {
		return false
	}
	return foldConcurrentWatch(e, seqs, pos, rv, r)
}

// listedPositions finds, for each key written, the write a List at rv
// shows it at (pos: the index into the key's ops in seqs, -1 before the
// first). It fails e (and returns false) for a listed state that is not
// the key's state at rv.
func listedPositions[T any](e *env[T], ops [][][]keyOp, got map[string]int64, rv core.ResourceVersion) (pos map[string]int, seqs map[string][]keyOp, ok bool) {
	e.t.Helper()
	exact := e.caps.ExactWriteRV
	// visible: the write's event can be in a snapshot at rv.
	visible := func(op keyOp) bool {
		if exact {
			return op.rv <= rv
		}
		return op.after < rv
	}
	pos = make(map[string]int) // key -> index of the last op folded in, -1 before the first
	seqs = make(map[string][]keyOp)
	for w := range ops {
		for k := range ops[w] {
			key := concKey(w, k)
			seq := ops[w][k]
			seqs[key] = seq
			// Candidates for the listed state: a put at the listed version,
			// or, for an absent key, before the first op or after a delete.
			var cands []int
			if n, ok := got[key]; ok {
				for i, op := range seq {
					if !op.del && op.n == n {
						cands = append(cands, i)
					}
				}
				if len(cands) == 0 {
					e.t.Errorf("List at RV %d returned %q at version %d, which was never written", rv, key, n)
					return nil, nil, false
				}
			} else {
				cands = append(cands, -1)
				for i, op := range seq {
					if op.del {
						cands = append(cands, i)
					}
				}
			}
			found := false
			for _, i := range cands {
				// The listed op happened at or before rv, the next one after.
				if (i < 0 || visible(seq[i])) && (i+1 == len(seq) || seq[i+1].rv > rv) {
					pos[key], found = i, true
					break
				}
			}
			if !found {
				state := "absent"
				if n, ok := got[key]; ok {
					state = fmt.Sprintf("at version %d", n)
				}
				e.t.Errorf("List at RV %d shows %q %s, which is not its state at that RV (writes: %s)", rv, key, state, fmtOps(seq, rv))
				return nil, nil, false
			}
		}
	}
	for key := range got {
		if _, ok := seqs[key]; !ok {
			e.t.Errorf("List at RV %d returned %q, which was never written", rv, key)
		}
	}
	return pos, seqs, true
}

// foldConcurrentWatch reads the watch from rv until every write after the
// listed positions (pos) is delivered, each exactly once and in per-key
// order.
func foldConcurrentWatch[T any](e *env[T], seqs map[string][]keyOp, pos map[string]int, rv core.ResourceVersion, r *reader[T]) bool {
	e.t.Helper()
	pending := 0
	for key, seq := range seqs {
		pending += len(seq) - 1 - pos[key]
	}
	for pending > 0 {
		ev, err := r.nextChange()
		if err != nil {
			e.t.Errorf("Watch(%d): %d writes still undelivered: %v", rv, pending, err)
			return false
		}
		key := e.suiteKey(ev.Key)
		seq, ok := seqs[key]
		if !ok {
			e.t.Errorf("Watch(%d): got %s for a key never written", rv, describe(e, ev))
			return false
		}
		i := pos[key] + 1
		if i == len(seq) {
			e.t.Errorf("Watch(%d): got %s after every write to %q was delivered (repeated or invented)", rv, describe(e, ev), key)
			return false
		}
		op := seq[i]
		want := write{key: key, n: op.n, rv: op.rv, after: max(op.after, rv)}
		switch {
		case op.del:
			want.typ = driver.Deleted
		case i == 0 || seq[i-1].del:
			want.typ = driver.Added
		default:
			want.typ = driver.Modified
		}
		if msg := e.mismatch(ev, want); msg != "" {
			e.t.Errorf("Watch(%d): want the event of %s, got %s: %s", rv, want, describe(e, ev), msg)
			return false
		}
		pos[key] = i
		pending--
	}
	return true
}

// fmtOps shows the writes to one key around rv, where a List at rv sits.
func fmtOps(seq []keyOp, rv core.ResourceVersion) string {
	j := sort.Search(len(seq), func(i int) bool { return seq[i].rv > rv })
	lo, hi := max(0, j-3), min(len(seq), j+3)
	var b strings.Builder
	if lo > 0 {
		b.WriteString("..., ")
	}
	for i, op := range seq[lo:hi] {
		if i > 0 {
			b.WriteString(", ")
		}
		if op.del {
			fmt.Fprintf(&b, "delete@%d", op.rv)
		} else {
			fmt.Fprintf(&b, "v%d@%d", op.n, op.rv)
		}
	}
	if hi < len(seq) {
		b.WriteString(", ...")
	}
	return b.String()
}
