package statuspage

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Status is everything the page shows, as served in JSON. Names and
// messages are redacted (see Redact); no object of any cache is in it.
type Status struct {
	Title string    `json:"title"`
	Time  time.Time `json:"time"`
	// Ready: every informer on the page has synced. NotReady says why not,
	// one line per informer.
	Ready    bool     `json:"ready"`
	NotReady []string `json:"notReady,omitempty"`
	// Live: no informer failed permanently or stalled (see Page.Live).
	Live      bool             `json:"live"`
	NotLive   []string         `json:"notLive,omitempty"`
	Informers []InformerStatus `json:"informers"`
	Queues    []QueueStatus    `json:"queues"`
	// Relays added with AddRelay.
	Relays []RelayStatus `json:"relays,omitempty"`
}

// InformerStatus is one informer's state.
type InformerStatus struct {
	Name string `json:"name"`
	// Kind is the source's kind (core.SyncStatus.Source), "" when unknown.
	Kind string `json:"kind,omitempty"`
	// Registered: the informer was added to the page (Add, InformerFor),
	// so its own answers (HasSynced, versions, last list error) are shown.
	// Metrics: its metrics reach the page (InformerOptions.Metrics).
	Registered bool `json:"registered"`
	Metrics    bool `json:"metrics"`

	Synced          bool   `json:"synced"`
	NotSyncedReason string `json:"notSyncedReason,omitempty"`
	Live            bool   `json:"live"`
	NotLiveReason   string `json:"notLiveReason,omitempty"`
	// Retrying says that lists or watches are failing and being retried
	// (the informer stays live meanwhile).
	Retrying string `json:"retrying,omitempty"`

	// AppliedVersion: every change up to it is in the cache.
	// ReceivedVersion: the last version the informer received (listed or
	// watched), applied or not.
	AppliedVersion  uint64 `json:"appliedVersion"`
	ReceivedVersion uint64 `json:"receivedVersion"`
	// HeadVersion is the source's newest version, read through the
	// informer (core.SharedIndexInformer.Head) when the status was taken
	// (at most every Options.HeadInterval); absent when the source cannot
	// tell (NoHead) or the last read failed (HeadError says why).
	HeadVersion *uint64 `json:"headVersion,omitempty"`
	HeadError   string  `json:"headError,omitempty"`
	NoHead      bool    `json:"noHead,omitempty"`
	// LagVersions is HeadVersion minus AppliedVersion, in the source's
	// units (etcd revisions, Postgres WAL bytes, JetStream sequences).
	// LagSeconds is how long the oldest head version not yet applied has
	// been known to the page: the cache is at least that far behind. Heads
	// are read when the page, the JSON or a probe is served, so it is as
	// fine as they are frequent.
	// Both are absent, never 0, while the head cannot be read:
	// LagUnknownSince is then the first failed read since the last good one.
	LagVersions     *uint64    `json:"lagVersions,omitempty"`
	LagSeconds      *float64   `json:"lagSeconds,omitempty"`
	LagUnknownSince *time.Time `json:"lagUnknownSince,omitempty"`

	Lists ListStats `json:"lists"`
	// Progress is the list in progress, if any: the initial sync, a
	// relist, or a failed list being retried.
	Progress       *Progress       `json:"progress,omitempty"`
	WatchRestarts  RestartStats    `json:"watchRestarts"`
	DecodeErrors   DecodeStats     `json:"decodeErrors"`
	Handlers       []HandlerStatus `json:"handlers"`
	SlowestHandler string          `json:"slowestHandler,omitempty"`
	// Checkpoints says what the informer's checkpoints are doing
	// (core.SyncStatus.Checkpoints): "off (...)", "none saved yet (...)" or
	// "saved version N at hh:mm:ss, every 1m0s", with the last failure.
	Checkpoints string `json:"checkpoints"`
	// Audit is the consistency audit's last run; absent when none ran.
	Audit *AuditStatus `json:"audit,omitempty"`
	// SchemaChanges are the changes of the source's schema that reached
	// the informer (core.SyncStatus.SchemaChanges); absent when none did.
	SchemaChanges *SchemaChangeStatus `json:"schemaChanges,omitempty"`
}

// ListStats counts an informer's lists.
type ListStats struct {
	Lists         int64      `json:"lists"`
	ListErrors    int64      `json:"listErrors"`
	Relists       int64      `json:"relists"`
	RelistErrors  int64      `json:"relistErrors"`
	ListedObjects int        `json:"listedObjects"`
	LastAt        *time.Time `json:"lastAt,omitempty"`
	LastError     string     `json:"lastError,omitempty"`
	LastErrorAt   *time.Time `json:"lastErrorAt,omitempty"`
}

// Progress is a list in progress, from InformerMetrics.ListProgress.
type Progress struct {
	Relist bool `json:"relist"`
	// Received objects so far; Estimated is the source's estimate of the
	// total, 0 when it cannot tell.
	Received  int64 `json:"received"`
	Estimated int64 `json:"estimated"`
	// Percent of Estimated received (absent without an estimate; capped
	// at 100 since estimates can be low).
	Percent *float64 `json:"percent,omitempty"`
	// RatePerSecond is the objects received per second since the list's
	// first progress report; ETASeconds the time left at that rate.
	RatePerSecond  float64   `json:"ratePerSecond"`
	ETASeconds     *float64  `json:"etaSeconds,omitempty"`
	StartedAt      time.Time `json:"startedAt"`
	ElapsedSeconds float64   `json:"elapsedSeconds"`
	// LastReportAt is the time of the last progress report (every 1,024
	// objects): a list that stopped moving shows here.
	LastReportAt time.Time `json:"lastReportAt"`
}

// RestartStats counts the watches that ended and were reopened.
type RestartStats struct {
	Total int64 `json:"total"`
	// Timeout: planned (the informer's MinWatchTimeout); Expired: the
	// version was gone and the informer relisted; Error: a failure,
	// retried with backoff.
	Timeout    int64      `json:"timeout"`
	Expired    int64      `json:"expired"`
	Error      int64      `json:"error"`
	LastReason string     `json:"lastReason,omitempty"`
	LastAt     *time.Time `json:"lastAt,omitempty"`
}

// DecodeStats counts the changes that could not be decoded (or that the
// transform rejected); each took its key out of the cache or stopped the
// informer (core.UndecodablePolicy). Last names the source, key and version
// of the last one (core.SyncStatus.LastDecodeError), never its value.
type DecodeStats struct {
	Count  int64      `json:"count"`
	Last   string     `json:"last,omitempty"`
	LastAt *time.Time `json:"lastAt,omitempty"`
}

// HandlerStatus is one event handler of an informer.
type HandlerStatus struct {
	Name string `json:"name"`
	// Pending notifications wait for the handler now; PeakPending is the
	// most that ever did.
	Pending     int   `json:"pending"`
	PeakPending int   `json:"peakPending"`
	Panics      int64 `json:"panics"`
}

// QueueStatus is one work queue, from its workqueue metrics.
type QueueStatus struct {
	Name string `json:"name"`
	// Depth: items waiting for a worker. Adds: adds that queued an item.
	// Retries: AddAfter and AddRateLimited calls. Processed: items a
	// worker finished (Done).
	Depth     int64 `json:"depth"`
	Adds      int64 `json:"adds"`
	Retries   int64 `json:"retries"`
	Processed int64 `json:"processed"`
	// Wait is Add to Get, Work is Get to Done, in seconds.
	AvgWaitSeconds float64 `json:"avgWaitSeconds"`
	MaxWaitSeconds float64 `json:"maxWaitSeconds"`
	AvgWorkSeconds float64 `json:"avgWorkSeconds"`
	MaxWorkSeconds float64 `json:"maxWorkSeconds"`
	// LongestRunningSeconds is the age of the oldest item being processed
	// and UnfinishedWorkSeconds the sum of their ages, as the queue last
	// set them (every workqueue.UnfinishedWorkUpdatePeriod).
	LongestRunningSeconds float64 `json:"longestRunningSeconds"`
	UnfinishedWorkSeconds float64 `json:"unfinishedWorkSeconds"`
}

// Snapshot takes the status of every informer and queue on the page,
// reading the sources' heads (in parallel, each bounded by
// Options.HeadTimeout and ctx).
func (p *Page) Snapshot(ctx context.Context) Status { return p.snapshot(ctx, true) }

// snapshot is Snapshot; heads says whether to read the sources' heads
// (the probes do not: they must answer at once).
func (p *Page) snapshot(ctx context.Context, heads bool) Status {
	p.mu.Lock()
	entries := make([]*informerEntry, 0, len(p.order))
	for _, n := range p.order {
		entries = append(entries, p.informers[n])
	}
	queues := make([]*queueRecord, 0, len(p.qorder))
	qnames := slices.Clone(p.qorder)
	for _, n := range p.qorder {
		queues = append(queues, p.queues[n])
	}
	p.mu.Unlock()

	var relays []RelayStatus
	if heads {
		p.readHeads(ctx, entries)
		relays = p.relayStatuses(ctx)
	}
	now := p.clk.Now()
	st := Status{Title: Redact(p.opts.Title), Time: now, Ready: true, Live: true,
		Informers: []InformerStatus{}, Queues: []QueueStatus{}}
	for _, e := range entries {
		is := p.informerStatus(e, now)
		if !is.Synced {
			st.Ready = false
			st.NotReady = append(st.NotReady, is.Name+": "+is.NotSyncedReason)
		}
		if !is.Live {
			st.Live = false
			st.NotLive = append(st.NotLive, is.Name+": "+is.NotLiveReason)
		}
		st.Informers = append(st.Informers, is)
	}
	for i, q := range queues {
		st.Queues = append(st.Queues, q.status(Redact(qnames[i])))
	}
	st.Relays = relays
	return st
}

// informerStatus is one informer's status: what the informer says of
// itself, its last head read, and its record, in that order of locks.
func (p *Page) informerStatus(e *informerEntry, now time.Time) InformerStatus {
	p.mu.Lock()
	inf := e.inf
	p.mu.Unlock()

	is := InformerStatus{
		Name:        Redact(e.name),
		Registered:  inf != nil,
		Handlers:    []HandlerStatus{},
		Checkpoints: "unknown (the informer is not on the page: Add it)",
	}
	// Ask the informer before taking the record's lock: the informer's
	// own locks are never held while it calls its metrics, but keep the
	// order one way anyway.
	var fi fromInformer
	if inf != nil {
		fi = askInformer(inf, &is)
	}
	e.headMu.Lock()
	head, headErr, headKnown, noHead, failedAt := e.head, e.headErr, e.headOK, e.noHead, e.failedAt
	e.headMu.Unlock()

	r := e.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	is.Metrics = r.metrics
	is.Audit = auditStatus(fi.audit, r.audit)
	synced, applied, received := fi.synced, fi.applied, fi.received
	if inf == nil {
		synced = r.listedOnce
		applied = r.applied
	}
	is.Synced = synced
	is.AppliedVersion = uint64(applied)
	is.ReceivedVersion = uint64(max(received, applied))

	stuckSince := r.stuckSinceLocked(inf != nil, applied, received, now)

	is.HeadError = headErr
	is.NoHead = noHead
	if !headKnown && !failedAt.IsZero() {
		is.LagUnknownSince = timePtr(failedAt)
	}
	if headKnown {
		is.HeadVersion, is.LagVersions, is.LagSeconds = r.lagLocked(head, applied, now)
	}

	r.countsLocked(&is, fi, now)

	is.Handlers = append(is.Handlers, r.handlersLocked()...)
	if len(is.Handlers) > 0 && is.Handlers[0].Pending > 0 {
		is.SlowestHandler = is.Handlers[0].Name
	}
	// A run that ended on a permanent failure: the cache is frozen.
	permanent, permanentAt := r.permanent, r.permanentAt
	if fi.stopped != nil && permanent == "" {
		permanent, permanentAt = describeError(fi.stopped), now
	}

	if !is.Synced {
		is.NotSyncedReason = r.notSyncedReasonLocked(&is, inf != nil, permanent)
	}

	// Live: not failed permanently, not stalled.
	switch {
	case permanent != "":
		is.NotLiveReason = fmt.Sprintf("stopped: failed permanently at %s, the cache is frozen at version %d: %s", permanentAt.UTC().Format(time.RFC3339), applied, permanent)
	case p.opts.StallTimeout > 0 && received > applied && now.Sub(stuckSince) >= p.opts.StallTimeout:
		is.NotLiveReason = fmt.Sprintf("stalled: received version %d but the applied version has stayed at %d for %s (a handler blocking the informer through MaxPending? a deadlock?)",
			received, applied, now.Sub(stuckSince).Truncate(time.Second))
	}
	is.Live = is.NotLiveReason == ""
	if r.failing != "" {
		is.Retrying = fmt.Sprintf("since %s: %s", r.failingSince.UTC().Format(time.RFC3339), r.failing)
	}
	return is
}

func (q *queueRecord) status(name string) QueueStatus {
	q.mu.Lock()
	defer q.mu.Unlock()
	qs := QueueStatus{
		Name: name, Depth: q.depth, Adds: q.adds, Retries: q.retries, Processed: q.workCount,
		MaxWaitSeconds: q.waitMax, MaxWorkSeconds: q.workMax,
		LongestRunningSeconds: q.longestRun, UnfinishedWorkSeconds: q.unfinished,
	}
	if q.waitCount > 0 {
		qs.AvgWaitSeconds = q.waitSum / float64(q.waitCount)
	}
	if q.workCount > 0 {
		qs.AvgWorkSeconds = q.workSum / float64(q.workCount)
	}
	return qs
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// progressText is a list's progress in words: "2,048 of ~5,000 objects
// (41%), 1,234/s, about 3s left".
func progressText(pr *Progress) string {
	s := thousands(pr.Received)
	if pr.Estimated > 0 {
		s += " of ~" + thousands(pr.Estimated) + " objects"
		if pr.Percent != nil {
			s += fmt.Sprintf(" (%.0f%%)", *pr.Percent)
		}
	} else {
		s += " objects (total unknown)"
	}
	if pr.RatePerSecond > 0 {
		s += ", " + thousands(int64(pr.RatePerSecond+0.5)) + "/s"
	}
	if pr.ETASeconds != nil {
		s += ", about " + shortDuration(*pr.ETASeconds) + " left"
	}
	return s
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// shortDuration formats seconds for people: 850ms, 12s, 3m05s, 2h10m.
func shortDuration(secs float64) string {
	d := time.Duration(secs * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}
