package pginformer

import (
	"sync"
	"time"
)

// SyncProgress is how far one List of one table has read, as given to
// Options.SyncProgress.
type SyncProgress struct {
	// Table is the table's quoted name, schema included.
	Table string
	// Rows is the number of rows read so far.
	Rows int64
	// Estimate is the planner's estimate of the table's rows
	// (pg_class.reltuples as of the last VACUUM or ANALYZE); -1 when the
	// table was never analyzed.
	Estimate int64
	// Elapsed is the time since the List started reading the table.
	Elapsed time.Duration
	// Rate is Rows per second of Elapsed.
	Rate float64
	// ETA is the time left at Rate to read Estimate rows; 0 when done, when
	// there is no estimate or the estimate is already passed.
	ETA time.Duration
	// Done is set on the last report of the List, when every row was read
	// (or the List failed).
	Done bool
}

// progressEvery is the least time between two reports of one List.
const progressEvery = time.Second

// syncProgress reports one List's progress at most every progressEvery.
type syncProgress struct {
	fn       func(SyncProgress)
	table    string
	estimate int64
	start    time.Time
	mu       sync.Mutex
	rows     int64
	last     time.Time
}

func newSyncProgress(fn func(SyncProgress), table string, estimate int64) *syncProgress {
	now := time.Now()
	return &syncProgress{fn: fn, table: table, estimate: estimate, start: now, last: now}
}

// add counts rows read; called with the List's emit lock held.
func (p *syncProgress) add(n int64) {
	if p == nil {
		return
	}
	p.rows += n
	if p.rows&1023 != 0 {
		return
	}
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last = now
		p.fn(p.report(now, false))
	}
}

func (p *syncProgress) done() {
	if p != nil {
		p.fn(p.report(time.Now(), true))
	}
}

func (p *syncProgress) report(now time.Time, done bool) SyncProgress {
	r := SyncProgress{Table: p.table, Rows: p.rows, Estimate: p.estimate, Elapsed: now.Sub(p.start), Done: done}
	if s := r.Elapsed.Seconds(); s > 0 {
		r.Rate = float64(r.Rows) / s
	}
	if !done && r.Rate > 0 && p.estimate > r.Rows {
		r.ETA = time.Duration(float64(p.estimate-r.Rows) / r.Rate * float64(time.Second))
	}
	return r
}
