package reliability

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
)

// AuditCounts is what the consistency audit (core.InformerOptions.Audit)
// said during a run: it runs every Config.AuditPeriod while the workload
// and the faults go on, report only (a heal would repair the very
// divergences the run's final checks are there to find), and once more
// after the final checks, when the cache is known to equal the source.
//
// An equal run and a failed one are both fine: a run fails when the source
// cannot be read (a fault), when the cache does not reach the audit's
// version within the period (it lags behind a fault) or when a relist is
// running. A divergent run is a divergence of the run: the audit claimed
// the cache differed from the source at one version, which is either true
// (and the cache was wrong, if only for a while) or an audit bug (a false
// positive). So is a run that failed for any other reason (a snapshot
// older than the cache, a panic, an adapter without AuditList): the
// adapter broke the AuditLister contract.
type AuditCounts struct {
	Runs, Equal, Divergent, Failed int
	// DuringFaults counts the runs that overlapped a fault: from its
	// injection to the informer catching up with the head read at its
	// heal.
	DuringFaults int
	// FailedBy counts failed runs by reason: AuditSourceDown,
	// AuditCacheLag, AuditListing, AuditContract.
	FailedBy map[string]int
	// FalsePositives counts the divergent runs of a run whose final
	// checks passed: the cache ended right, and the audit said otherwise
	// (or the cache was wrong for a while and nothing else noticed).
	FalsePositives int
	// InFlight sums the keys the runs left out as changed after their
	// version.
	InFlight int64
	// Findings describes each divergent run (and each that broke the
	// contract): its result, with the keys, and the faults active then.
	Findings []string
}

// String is, for example, "12 (5 during faults; 9 equal, 0 divergent, 3
// failed: source 2, lag 1)".
func (c AuditCounts) String() string {
	s := fmt.Sprintf("%d (%d during faults; %d equal, %d divergent, %d failed", c.Runs, c.DuringFaults, c.Equal, c.Divergent, c.Failed)
	if c.Failed > 0 {
		s += ": " + c.failedBy()
	}
	return s + ")"
}

func (c AuditCounts) failedBy() string {
	var parts []string
	for _, why := range []string{AuditSourceDown, AuditCacheLag, AuditListing, AuditContract} {
		if n := c.FailedBy[why]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", why, n))
		}
	}
	return strings.Join(parts, ", ")
}

// Why an audit run failed (AuditCounts.FailedBy).
const (
	AuditSourceDown = "source" // the source's read failed: a fault broke it
	AuditCacheLag   = "lag"    // the cache did not reach the audit's version within the period
	AuditListing    = "list"   // a list was running when the run began
	AuditContract   = "other"  // anything else: a bug (snapshot older than the cache, panic, no AuditList)
)

// auditFailReason classifies a failed run by its error (core/auditrun.go
// words each failure; the suite reads the words, a test's licence).
func auditFailReason(err error) string {
	if err == nil {
		return AuditContract
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "audit: read the source"):
		return AuditSourceDown
	case strings.Contains(msg, "the cache did not reach"):
		return AuditCacheLag
	case strings.Contains(msg, "a list is running"):
		return AuditListing
	}
	return AuditContract
}

// faultSpan is one injected fault, from its injection to the informer
// catching up with the head read at its heal (zero while it has not).
type faultSpan struct {
	kind     conformance.Fault
	from, to time.Time
}

// auditor collects a run's audit results (AuditOptions.OnResult, from the
// informer's audit goroutine) with the faults injected, so that each
// divergent result names the faults active while it ran.
type auditor struct {
	t     testing.TB
	start time.Time

	mu      sync.Mutex
	counts  AuditCounts
	faults  []*faultSpan
	stopped bool // the run is stopping: a run failed by it is not counted
}

func newAuditor(t testing.TB, start time.Time) *auditor {
	return &auditor{t: t, start: start, counts: AuditCounts{FailedBy: map[string]int{}}}
}

// auditOptions returns the informer's audit: every period, report only,
// the source read at full speed (16 keys: a pace would only slow the run).
func auditOptions[T any](a *auditor, period time.Duration) *core.AuditOptions[T] {
	return &core.AuditOptions[T]{Period: period, Pace: -1, Heal: core.HealReportOnly, OnResult: a.result}
}

// injected records a fault as it is injected; caughtUp ends it.
func (a *auditor) injected(f conformance.Fault) *faultSpan {
	s := &faultSpan{kind: f, from: time.Now()}
	a.mu.Lock()
	a.faults = append(a.faults, s)
	a.mu.Unlock()
	return s
}

func (a *auditor) caughtUp(s *faultSpan) {
	a.mu.Lock()
	s.to = time.Now()
	a.mu.Unlock()
}

// stop makes later failed results (runs cut short by the informer's stop)
// not count; a run that compared still counts.
func (a *auditor) stop() {
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
}

// activeLocked names the faults whose span overlaps [from, to] ("none").
func (a *auditor) activeLocked(from, to time.Time) string {
	out := a.overlapLocked(from, to)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func (a *auditor) overlapLocked(from, to time.Time) []string {
	var out []string
	for _, s := range a.faults {
		if s.from.After(to) || !s.to.IsZero() && s.to.Before(from) {
			continue
		}
		end := "not caught up"
		if !s.to.IsZero() {
			end = fmt.Sprintf("caught up at +%v", s.to.Sub(a.start).Round(time.Millisecond))
		}
		out = append(out, fmt.Sprintf("%s (injected at +%v, %s)", s.kind, s.from.Sub(a.start).Round(time.Millisecond), end))
	}
	return out
}

// result records one run's result.
func (a *auditor) result(r core.AuditResult) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped && r.Outcome == core.AuditFailed {
		return
	}
	c := &a.counts
	c.Runs++
	c.InFlight += r.InFlight
	if len(a.overlapLocked(r.Started, r.Started.Add(r.Duration))) > 0 {
		c.DuringFaults++
	}
	at := fmt.Sprintf("+%v", r.Started.Sub(a.start).Round(time.Millisecond))
	switch r.Outcome {
	case core.AuditEqual:
		c.Equal++
		return
	case core.AuditDivergent:
		c.Divergent++
	default:
		c.Failed++
		why := auditFailReason(r.Err)
		c.FailedBy[why]++
		if why != AuditContract {
			return
		}
	}
	f := fmt.Sprintf("audit at %s: %s; faults active: %s", at, r, a.activeLocked(r.Started, r.Started.Add(r.Duration)))
	c.Findings = append(c.Findings, f)
	a.t.Logf("%s %s", time.Now().Format("15:04:05.000"), f)
}

// finish returns the counts once the run's checks are done; passed says
// whether every other check passed, which makes each divergent audit a
// false positive. Each finding becomes a divergence of the run.
func (a *auditor) finish(passed bool) (AuditCounts, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.counts
	var div []string
	label := "audit (the final checks failed too)"
	if passed {
		label = "audit FALSE POSITIVE (the final checks passed)"
		c.FalsePositives = c.Divergent
	}
	for _, f := range c.Findings {
		div = append(div, label+": "+f)
	}
	return c, div
}

// logWriter is an io.Writer onto t.Logf, for the informer's Logger: an
// audit that fails while a fault lasts logs at Warn, by the dozen.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// TestLogger logs to t (a run's informers and the sharded variant's replicas).
func TestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, nil))
}

// add sums two runs' counts (findings included), for the report.
func (c AuditCounts) add(o AuditCounts) AuditCounts {
	fb := map[string]int{}
	for k, n := range c.FailedBy {
		fb[k] += n
	}
	for k, n := range o.FailedBy {
		fb[k] += n
	}
	return AuditCounts{
		Runs: c.Runs + o.Runs, DuringFaults: c.DuringFaults + o.DuringFaults, Equal: c.Equal + o.Equal, Divergent: c.Divergent + o.Divergent, Failed: c.Failed + o.Failed,
		FailedBy: fb, FalsePositives: c.FalsePositives + o.FalsePositives, InFlight: c.InFlight + o.InFlight,
		Findings: append(slices.Clone(c.Findings), o.Findings...),
	}
}
