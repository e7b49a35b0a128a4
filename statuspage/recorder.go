package statuspage

import (
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
)

// informerRecord is what the page remembers of one informer's metrics. Its
// methods implement core.InformerMetrics: they are called from the
// informer's goroutines and only take rec.mu for a few assignments.
type informerRecord struct {
	clk clock.Clock

	mu sync.Mutex
	// metrics is true once the informer asked the page for its metrics
	// (InformerOptions.Metrics is the page, or a core.MultiMetrics holding it).
	metrics bool

	lists, listErrors, relists, relistErrors int64
	listed                                   int
	listedOnce                               bool // a list succeeded (sync fallback without a registered informer)
	lastListAt                               time.Time
	lastListErr                              string
	lastListErrAt                            time.Time

	restartsTimeout, restartsExpired, restartsError int64
	lastRestartReason                               string
	lastRestartAt                                   time.Time

	decodeErrors      int64
	lastDecodeErr     string
	lastDecodeErrAt   time.Time
	permanent         string // the permanent failure that ended the run, if any
	permanentAt       time.Time
	applied           core.ResourceVersion
	appliedChangedAt  time.Time
	appliedReportedAt time.Time
	behindSince       time.Time // first seen received > applied (page side)

	// The list in progress (or the last one).
	listing        bool
	listStart      time.Time
	listStartCount int64
	listReceived   int64
	listEstimated  int64
	listLastAt     time.Time
	finalProgress  bool // the next ListProgress repeats the list's end (see ListProgress)
	listedCount    int64

	// failing says what has been failing since failingSince, while the
	// informer retries: a list error, a watch error. A successful list, a
	// planned watch timeout or a new applied version clears it.
	failing      string
	failingSince time.Time

	handlers map[string]*handlerRecord
	audit    auditRecord

	// heads are the head versions read at page time, oldest first, each
	// with the time it was first seen; lag in seconds is the age of the
	// oldest one not yet applied.
	heads []headSample
}

type handlerRecord struct {
	pending, peak int
	panics        int64
}

type headSample struct {
	rv core.ResourceVersion
	at time.Time
}

// maxHeadSamples bounds the samples kept per informer: beyond it the oldest
// are merged away, which only makes the lag in seconds coarser.
const maxHeadSamples = 64

var _ core.InformerMetrics = (*informerRecord)(nil)

func newInformerRecord(clk clock.Clock) *informerRecord {
	return &informerRecord{clk: clk, handlers: map[string]*handlerRecord{}}
}

func (r *informerRecord) Listed(relist bool, items int, err error) {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if relist {
		r.relists++
	} else {
		r.lists++
	}
	r.listing = false
	r.lastListAt = now
	if err != nil {
		if relist {
			r.relistErrors++
		} else {
			r.listErrors++
		}
		r.lastListErr, r.lastListErrAt = describeError(err), now
		r.failLocked("list failed: "+r.lastListErr, now)
		if errors.Is(err, driver.ErrPermanent) {
			r.permanent, r.permanentAt = describeError(err), now
		}
		return
	}
	r.lastListErr = ""
	r.permanent = ""
	r.failing = ""
	r.listed, r.listedOnce = items, true
	r.listedCount = int64(items)
	// The reflector reports the final count through ListProgress once more
	// after a successful list; that call must not look like a new list.
	r.finalProgress = true
}

func (r *informerRecord) ListProgress(received, estimated int64) {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finalProgress {
		r.finalProgress = false
		if !r.listing && received == r.listedCount {
			r.listEstimated = estimated
			return
		}
	}
	if !r.listing || received < r.listReceived {
		r.listing = true
		r.listStart, r.listStartCount = now, received
	}
	r.listReceived, r.listEstimated, r.listLastAt = received, estimated, now
}

func (r *informerRecord) WatchRestarted(reason error) {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastRestartAt = now
	switch {
	case reason == nil:
		r.restartsTimeout++
		r.lastRestartReason = "planned watch timeout"
		r.failing = ""
	case errors.Is(reason, driver.ErrExpired):
		r.restartsExpired++
		r.lastRestartReason = "expired, relisting: " + describeError(reason)
	default:
		r.restartsError++
		r.lastRestartReason = describeError(reason)
		r.failLocked("watch failed, reopened with backoff: "+r.lastRestartReason, now)
		if errors.Is(reason, driver.ErrPermanent) {
			r.permanent, r.permanentAt = describeError(reason), now
		}
	}
}

func (r *informerRecord) Applied(rv core.ResourceVersion) {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.appliedReportedAt = now
	if rv != r.applied || r.appliedChangedAt.IsZero() {
		if rv != r.applied {
			r.failing = ""
		}
		r.applied, r.appliedChangedAt = rv, now
	}
}

func (r *informerRecord) failLocked(what string, now time.Time) {
	if r.failing == "" {
		r.failingSince = now
	}
	r.failing = what
}

func (r *informerRecord) PendingNotifications(handler string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.handlerLocked(handler)
	h.pending = n
	h.peak = max(h.peak, n)
}

func (r *informerRecord) HandlerPanicked(handler string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlerLocked(handler).panics++
}

func (r *informerRecord) DecodeFailed() {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decodeErrors++
	// The error itself goes to the informer's ErrorHandler, where
	// Page.ErrorHandler records its description; here only the time is
	// known.
	r.lastDecodeErrAt = now
}

// decodeError records the description of a decode error the error handler
// saw (Page.ErrorHandler).
func (r *informerRecord) decodeError(desc string) {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastDecodeErr, r.lastDecodeErrAt = desc, now
}

func (r *informerRecord) handlerLocked(name string) *handlerRecord {
	h, ok := r.handlers[name]
	if !ok {
		h = &handlerRecord{}
		r.handlers[name] = h
	}
	return h
}

// sawHead records a head read at page time.
func (r *informerRecord) sawHead(rv core.ResourceVersion, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.heads); n > 0 && r.heads[n-1].rv >= rv {
		return
	}
	r.heads = append(r.heads, headSample{rv: rv, at: at})
	if len(r.heads) > maxHeadSamples {
		// Keep the oldest (it dates the lag) and drop the second oldest.
		r.heads = append(r.heads[:1], r.heads[2:]...)
	}
}

// lagSince returns when the oldest head version above applied was first
// seen, dropping the samples applied has reached.
func (r *informerRecord) lagSinceLocked(applied core.ResourceVersion) (time.Time, bool) {
	i := sort.Search(len(r.heads), func(i int) bool { return r.heads[i].rv > applied })
	if i > 0 {
		// Keep the last applied sample out: it is history now.
		r.heads = append(r.heads[:0], r.heads[i:]...)
	}
	if len(r.heads) == 0 {
		return time.Time{}, false
	}
	return r.heads[0].at, true
}

// queueRecord is what the page remembers of one work queue. Its fields are
// set through the workqueue metric types below, called under the queue's
// lock: they only take rec.mu.
type queueRecord struct {
	mu                     sync.Mutex
	depth                  int64
	adds, retries          int64
	waitCount, workCount   int64
	waitSum, workSum       float64
	waitMax, workMax       float64
	unfinished, longestRun float64
}

type queueGauge struct {
	q *queueRecord
	f func(q *queueRecord, delta float64)
}

func (g queueGauge) Inc() { g.q.mu.Lock(); g.f(g.q, 1); g.q.mu.Unlock() }
func (g queueGauge) Dec() { g.q.mu.Lock(); g.f(g.q, -1); g.q.mu.Unlock() }
func (g queueGauge) Set(v float64) {
	g.q.mu.Lock()
	g.f(g.q, v)
	g.q.mu.Unlock()
}
func (g queueGauge) Observe(v float64) {
	g.q.mu.Lock()
	g.f(g.q, v)
	g.q.mu.Unlock()
}
