package pginformer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// The fan-out: one owner for everything between the replication stream and
// the tables' watches, after etcd's client-cache demux. It holds, behind
// its own lock, the stream's position and generation, each table's
// transactions not yet acknowledged (and some history), the table's floor,
// each watch's position, the acknowledgements and the change signal. The
// stream broadcasts into it (commit, keepalive, started, fail); a Table's
// watch registers with it, asks it for the next thing to deliver (next),
// and acknowledges through it (ack). Nothing here does I/O or takes the
// Source's lock: the Source's lock may be held when a verb is called (it
// comes first), never the other way round.
type fanout struct {
	history int
	slot    string // for messages
	where   string // the server, for messages (no secrets)

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever anything here changes
	closed  bool
	// gen numbers the stream's runs: it bumps at every start and failure.
	// err is why the current generation's stream ended; nil while it runs.
	gen uint64
	err error
	// pos: the stream delivered every transaction up to here. lastTxn: the
	// newest transaction taken in; a resumed stream skips those at or
	// below it.
	pos, lastTxn core.ResourceVersion
	feeds        []*feed
	// Progress requests: numbered when made (seq), sent to the server
	// (sent), answered by the next keepalive (done).
	progressReq                 bool
	progressSeq, sent, answered uint64
	wake                        context.CancelFunc // wakes the stream loop's receive; nil when none runs
	// The catalog check (guard.go) vouches that every table still had the
	// schema its Table proved, and was still published, at verified: a
	// watch's Bookmark never passes it. Checks are numbered when asked
	// for (verifyAsked); verifyDone is the newest request a vouching check
	// was made after. guardWake asks the guard to check now.
	verified                rv
	verifyAsked, verifyDone uint64
	guardWake               chan struct{}
}

type rv = core.ResourceVersion

// feed is one table's part of the fan-out. Every field is guarded by the
// fanout's mu.
type feed struct {
	name  string // the table, for messages: postgres table "s"."t"
	table string // the table's quoted name

	// shape is what the Table proved of the table (and proved again at a
	// schema change it relisted over); halt, when set, holds the table's
	// watches back from a schema change on (schema.go, guard.go).
	shape *tableShape
	halt  *halt
	// lastChange and changes: the schema changes met (Table.LastSchemaChange,
	// Table.SchemaChanges); atomic, noted before the watches can see them.
	lastChange atomic.Pointer[SchemaChangeError]
	changes    atomic.Int64

	active bool                 // listed in the current slot's lifetime
	floor  core.ResourceVersion // oldest version a Watch may start from
	// applied: every open watch's consumer applied up to here (the lowest
	// watch position; it stays where the last watch left it).
	applied core.ResourceVersion
	decoded core.ResourceVersion // the known keys and values reflect every batch up to here
	// covered: a snapshot read the table at this version, so the stream's
	// transactions at or below it are already in the table's state. Not
	// applied: a consumer's acknowledgement (a Watch starting from a
	// helper List's version, ahead of the stream) says nothing of what
	// other watches still need from the stream.
	covered core.ResourceVersion
	// ackedChanges counts the changes of batches at or below applied.
	ackedChanges int
	batches      []*batch // streamed: unacknowledged ones, and some history before them
	watchers     []*watcher

	// gated: a checkpointing informer watches the table; the slot's
	// confirmed position stays at or below durable, its last durable
	// checkpoint (restore.go).
	gated   bool
	durable core.ResourceVersion
}

// halt holds a table's watches back at a schema change: they deliver the
// batches below at, no Bookmark at or past it, then end with err; a nil
// err waits for the guard's decision (change is what the stream met).
type halt struct {
	at     rv
	err    error
	change *shapeChange
}

// watcher is one open watch: its position is the one place a watch's
// progress is kept.
type watcher struct {
	fd  *feed
	pos core.ResourceVersion // delivered to and acknowledged by its consumer
	gen uint64               // the stream generation it started in
}

func newFanout(history int, slot, where string) *fanout {
	return &fanout{history: history, slot: slot, where: where, changed: make(chan struct{}), guardWake: make(chan struct{}, 1)}
}

// init names a new feed; it is not active until listed or restored.
func (fd *feed) init(name, table string) { fd.name, fd.table, fd.floor = name, table, math.MaxUint64 }

// add makes fd part of the fan-out (NewTable, before any stream).
func (f *fanout) add(fd *feed) {
	f.mu.Lock()
	f.feeds = append(f.feeds, fd)
	f.mu.Unlock()
}

func (f *fanout) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// The stream's side.

// session starts a new slot lifetime at its consistent point cp: every
// table must list (or restore) again.
func (f *fanout) session(cp core.ResourceVersion) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pos, f.lastTxn = cp, cp
	for _, fd := range f.feeds {
		fd.expire()
	}
	f.notifyLocked()
}

// started records a stream starting at start and returns its generation.
func (f *fanout) started(start core.ResourceVersion) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	f.err = nil
	f.pos = max(f.pos, start)
	f.notifyLocked()
	return f.gen
}

// current reports whether gen is the running stream's generation.
func (f *fanout) current(gen uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen == gen
}

// fail ends the current stream generation with err. expired says the slot
// is gone: every table must list again.
func (f *fanout) fail(err error, expired bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failLocked(err, expired)
}

func (f *fanout) failLocked(err error, expired bool) {
	f.gen++
	f.err = err
	if expired {
		for _, fd := range f.feeds {
			fd.expire()
		}
	}
	f.notifyLocked()
}

// close ends every watch with errClosed.
func (f *fanout) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.failLocked(errClosed, true)
}

// position is the stream's position.
func (f *fanout) position() core.ResourceVersion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pos
}

// commit broadcasts one transaction, ending at rv (its commit record
// starting at commitLSN), to the tables it touched: changes[i] are those
// of tables[i].
func (f *fanout) commit(rv, commitLSN core.ResourceVersion, tables []*tableState, changes [][]wal.Change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rv > f.lastTxn { // on a resumed stream, skip what we had
		for i, t := range tables {
			fd, cs := &t.feed, changes[i]
			switch {
			case !fd.active:
			case rv <= fd.covered:
				// Listed by a helper snapshot the stream had not
				// reached: the table has this transaction already.
				fd.floor = max(fd.floor, rv)
			default:
				fd.batches = append(fd.batches, &batch{rv: rv, commitLSN: commitLSN, changes: cs, size: len(cs)})
			}
		}
		f.lastTxn = rv
	}
	f.pos = max(f.pos, rv)
	f.notifyLocked()
}

// keepalive records the server's WAL end from a keepalive received with no
// transaction open: nothing below it is pending. It answers the progress
// requests sent before it.
func (f *fanout) keepalive(walEnd core.ResourceVersion) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pos = max(f.pos, walEnd)
	f.answered = f.sent
	f.notifyLocked()
}

// ackPosition is the position every table has applied: the stream
// position, held back by the oldest batch some table has not acknowledged
// yet and by a gated table's last durable checkpoint. The server may
// discard WAL up to it.
func (f *fanout) ackPosition() core.ResourceVersion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ackLocked()
}

func (f *fanout) ackLocked() core.ResourceVersion {
	ack := f.pos
	for _, fd := range f.feeds {
		if b := fd.pending(); b != nil && b.commitLSN < ack {
			ack = b.commitLSN
		}
		if fd.gated && fd.durable < ack {
			ack = fd.durable
		}
	}
	return ack
}

// Progress requests: a watch asks (requestProgress), the stream loop takes
// the request (takeProgressRequest), sends it and says so (progressSent);
// the next keepalive answers it.

// ticket is a watch's progress request: answered once a keepalive after
// it arrived (progress) and the catalog was vouched for after it (verify).
type ticket struct{ progress, verify uint64 }

// requestProgress asks the stream for a keepalive carrying the server's
// WAL end, and the guard for a catalog check, and returns the request.
func (f *fanout) requestProgress() ticket {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.progressReq = true
	f.progressSeq++
	f.verifyAsked++
	if f.wake != nil {
		f.wake() // the stream loop sends the request now, not at its next tick
	}
	f.wakeGuardLocked()
	return ticket{f.progressSeq, f.verifyAsked}
}

func (f *fanout) wakeGuardLocked() {
	select {
	case f.guardWake <- struct{}{}:
	default:
	}
}

// probe asks for a keepalive without a watch waiting for it (silence).
func (f *fanout) probe() {
	f.mu.Lock()
	f.progressReq = true
	f.mu.Unlock()
}

// takeProgressRequest returns whether a keepalive is wanted, the number of
// the newest request, and the position to acknowledge.
func (f *fanout) takeProgressRequest() (reply bool, seq uint64, ack core.ResourceVersion) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reply, seq = f.progressReq, f.progressSeq
	f.progressReq = false
	return reply, seq, f.ackLocked()
}

// progressSent records that the requests up to seq went to the server.
func (f *fanout) progressSent(seq uint64) {
	f.mu.Lock()
	f.sent = seq
	f.mu.Unlock()
}

// setWake installs (or, nil, removes) the stream loop's wake-up.
func (f *fanout) setWake(wake context.CancelFunc) {
	f.mu.Lock()
	f.wake = wake
	f.mu.Unlock()
}

// The tables' side: watches.

// register opens a watch of fd from version from. The table counts as
// applied up to the lowest position of its open watches: a watch that is
// ahead (from a later List) must not acknowledge what a slower one has yet
// to apply.
func (f *fanout) register(fd *feed, from core.ResourceVersion) (*watcher, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkLocked(fd, from); err != nil {
		return nil, err
	}
	w := &watcher{fd: fd, pos: from}
	fd.watchers = append(fd.watchers, w)
	f.advanceLocked(fd)
	return w, nil
}

func (f *fanout) checkLocked(fd *feed, from core.ResourceVersion) error {
	if f.closed {
		return errClosed
	}
	if !fd.active || from < fd.floor {
		return fmt.Errorf("%s: version %s is older than what the replication slot %q still serves: %w", fd.name, lsn(from), f.slot, driver.ErrExpired)
	}
	return nil
}

// begin ties w to the running stream, once the watch made sure one runs.
func (f *fanout) begin(w *watcher) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkLocked(w.fd, w.pos); err != nil {
		return err
	}
	if f.err != nil {
		return f.err
	}
	w.gen = f.gen
	return nil
}

// unregister closes a watch; the others may now count as applied.
func (f *fanout) unregister(w *watcher) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd := w.fd
	for i, x := range fd.watchers {
		if x == w {
			fd.watchers = append(fd.watchers[:i], fd.watchers[i+1:]...)
			break
		}
	}
	f.advanceLocked(fd)
}

// ack records that w's consumer applied everything up to pos.
func (f *fanout) ack(w *watcher, pos core.ResourceVersion) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.pos = pos
	f.advanceLocked(w.fd)
}

// advanceLocked moves fd's applied position to the lowest of its open
// watches'; with none open it stays where the last one left it.
func (f *fanout) advanceLocked(fd *feed) {
	if len(fd.watchers) == 0 || !fd.active {
		return
	}
	low := fd.watchers[0].pos
	for _, w := range fd.watchers[1:] {
		low = min(low, w.pos)
	}
	fd.advance(low, f.history)
}

// step is what a watch is to do next: deliver batches, or a Bookmark at
// bookmark (answered: it answers the progress request the watch asked),
// or wait on wait.
type step struct {
	batches  []*batch
	bookmark core.ResourceVersion
	answered bool
	wait     <-chan struct{}
}

// next returns w's next step, with the batches after w's position (at most
// emitMaxBatches, appended to buf). asked is the progress request w waits
// to see answered (zero: none). Every batch received before the stream
// ended is delivered before its failure is returned; at a schema change
// (halt), every batch below it before the change's error. A Bookmark never
// passes what the guard vouched for: a table that stopped being streamed
// (dropped, out of the publication) sends nothing, and only the catalog
// says so.
func (f *fanout) next(w *watcher, asked ticket, buf []*batch) (step, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd := w.fd
	if f.closed {
		return step{}, errClosed
	}
	if !fd.active || fd.floor > w.pos {
		switch err := f.err; {
		case fd.active:
			return step{}, fmt.Errorf("%s: version %s fell out of the changes kept in memory (from %s on; Options.History): %w", fd.name, lsn(w.pos), lsn(fd.floor), driver.ErrExpired)
		case err == nil || !errors.Is(err, driver.ErrExpired):
			return step{}, fmt.Errorf("%s: the replication slot %q was lost or recreated: %w", fd.name, f.slot, driver.ErrExpired)
		default:
			return step{}, err
		}
	}
	limit := rv(math.MaxUint64) // deliverable: batches below limit
	if fd.halt != nil {
		limit = fd.halt.at
	}
	if i := fd.firstAfter(w.pos); i < len(fd.batches) && fd.batches[i].rv < limit {
		j := i
		for j < len(fd.batches) && j < i+emitMaxBatches && fd.batches[j].rv < limit {
			j++
		}
		return step{batches: append(buf, fd.batches[i:j]...)}, nil
	}
	if fd.halt != nil && fd.halt.err != nil {
		return step{}, fd.halt.err
	}
	if f.gen != w.gen {
		if f.err != nil {
			return step{}, f.err
		}
		return step{}, fmt.Errorf("postgres %s: replication stream of slot %q restarted", f.where, f.slot)
	}
	answer := asked.progress != 0 && f.answered >= asked.progress && f.verifyDone >= asked.verify
	bookmark := max(w.pos, min(f.pos, f.verified, limit-1))
	if bookmark > w.pos || answer {
		return step{bookmark: bookmark, answered: answer}, nil
	}
	return step{wait: f.changed}, nil
}

// undecoded returns fd's batches not decoded yet, up to and including the
// one at rv, in version order.
func (f *fanout) undecoded(fd *feed, rv core.ResourceVersion) []*batch {
	f.mu.Lock()
	defer f.mu.Unlock()
	var todo []*batch
	for i := fd.firstAfter(fd.decoded); i < len(fd.batches) && fd.batches[i].rv <= rv; i++ {
		todo = append(todo, fd.batches[i])
	}
	return todo
}

// decodedTo records that fd's known keys and values reflect every batch up
// to rv.
func (f *fanout) decodedTo(fd *feed, rv core.ResourceVersion) {
	f.mu.Lock()
	fd.decoded = max(fd.decoded, rv)
	f.mu.Unlock()
}
