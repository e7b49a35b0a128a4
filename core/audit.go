package core

import (
	"fmt"
	"strings"
	"time"
)

// AuditOptions turns on the consistency audit of an informer
// (InformerOptions.Audit): every Period the informer compares its cache with
// the source as of one version and reports (and by default heals) what
// differs. It needs a driver.ListerWatcher that implements driver.AuditLister (found with
// driver.Capability); without one each run reports ErrAuditUnsupported.
//
// The audit is off unless asked for: a run reads the whole source (within
// the informer's filter), which is a cost in the source's capacity that
// only the operator can budget (a 10-minute audit of a large etcd prefix or
// of every ConfigMap of a cluster is a steady read load). The zero
// AuditOptions is the recommended setting.
type AuditOptions[T any] struct {
	// Period between runs, each delayed by up to a fifth more at random so
	// that many informers do not read their sources at once. 0 means 10
	// minutes. The first run starts one period after the cache synced.
	Period time.Duration
	// Pace caps the objects read per second; 0 means 10,000, negative
	// means no cap. The audit blocks the source's read (in Emit), never the
	// informer. A read object costs the source its delivery and this
	// process a decoding (for NATS KV and JSON objects, about as much CPU
	// as half an applied change): at 10,000 a second a 1M-object audit
	// takes 100 s, a sixth of the default period, and the informer keeps
	// 0.8× or more of its throughput on 2 cores with the source beside it
	// (BENCHMARKS.md, the audit rows); 20,000 did not on NATS.
	Pace float64
	// Equal compares the cached object with the source's (after
	// InformerOptions.Transform). nil means reflect.DeepEqual: both objects
	// come from the same adapter's decoding, so they differ in
	// representation only when they differ in value, and comparing them
	// allocates nothing (encoding both with a codec would cost two
	// encodings per object). Set it when objects hold fields the source does
	// not determine (a cached pointer, a timestamp of the decoding).
	Equal func(cached, source T) bool
	// Heal says what a run does about the differences it found; the zero
	// value, HealKeys, applies the source's state of each differing key.
	Heal HealPolicy
	// MaxHeal bounds how many differing keys one run keeps (with their
	// source object) to heal; beyond it the keys are counted, the first
	// MaxHeal healed and the rest left to the next run. 0 means 10,000.
	MaxHeal int
	// OnResult, when set, receives every run's result (after metrics and
	// the log line).
	OnResult func(AuditResult)
}

// HealPolicy is what an audit does about a difference.
type HealPolicy uint8

const (
	// HealKeys applies, for each key that differs, the source's state at
	// the audit's version as an ordinary change: handlers get OnAdd,
	// OnUpdate or OnDelete (finalStateUnknown true) for those keys only. A
	// key changed by the watch since then is left to the watch.
	HealKeys HealPolicy = iota
	// HealReportOnly reports and logs the differences and changes nothing.
	HealReportOnly
	// HealRelist ends the watch so that the informer relists, as after an
	// expired version: every key is read again and handlers get an update
	// for each (an unchanged one only as a resync when
	// InformerOptions.Equal is set). For a cache that may be wrong in ways
	// one run cannot list (more than MaxHeal keys), at a relist's cost.
	HealRelist
)

func (p HealPolicy) String() string {
	switch p {
	case HealKeys:
		return "heal keys"
	case HealReportOnly:
		return "report only"
	case HealRelist:
		return "relist"
	}
	return fmt.Sprintf("HealPolicy(%d)", uint8(p))
}

// AuditOutcome is a run's verdict.
type AuditOutcome string

const (
	// AuditEqual: every compared key agreed.
	AuditEqual AuditOutcome = "equal"
	// AuditDivergent: some key was missing, extra or different.
	AuditDivergent AuditOutcome = "divergent"
	// AuditFailed: the run could not compare (the source's read failed,
	// the cache did not reach the version, the informer stopped); Err says
	// why. Nothing is known about the cache.
	AuditFailed AuditOutcome = "failed"
)

// AuditKeyLimit is how many keys of each kind an AuditResult names.
const AuditKeyLimit = 5

// AuditResult is one audit run. It names keys, never values.
type AuditResult struct {
	Outcome AuditOutcome
	// Version is the source's version the cache was compared at.
	Version ResourceVersion
	// Started and Duration time the run.
	Started  time.Time
	Duration time.Duration
	// Rows is how many objects the source's read delivered.
	Rows int64
	// Compared is how many keys were compared (rows and cached keys, less
	// those in flight).
	Compared int64
	// Missing counts keys the source had at Version and the cache did not;
	// Extra, keys the cache had and the source did not; Differing, keys
	// whose objects differ (by AuditOptions.Equal).
	Missing, Extra, Differing int64
	// InFlight counts keys left out because a change after Version reached
	// the cache while the run read: their state at Version is not the
	// cache's any more. A relist past Version during the run also leaves
	// out each key missing from the cache (the cache never held the
	// state at Version; the next run compares them), and so does a key
	// the source dropped without a version since it was read (see
	// driver.AuditRechecker).
	InFlight int64
	// Undecodable counts source objects that did not decode; they are not
	// compared (InformerOptions.Undecodable keeps them out of the cache).
	Undecodable int64
	// MissingKeys, ExtraKeys and DifferingKeys are the first
	// AuditKeyLimit keys of each kind.
	MissingKeys, ExtraKeys, DifferingKeys []string
	// Healed counts the keys the run repaired (HealKeys), or the keys
	// found different when it asked for a relist (HealRelist).
	Healed int64
	// Err is why a run failed (AuditFailed).
	Err error
}

// Divergent is Missing+Extra+Differing.
func (r AuditResult) Divergent() int64 { return r.Missing + r.Extra + r.Differing }

// String says the result in one line, for example "divergent at version
// 812: 1 missing [users/7], 0 extra, 2 differing [users/3 users/9], 3
// healed, 14 in flight, 10000 rows in 1.2s".
func (r AuditResult) String() string {
	if r.Outcome == AuditFailed {
		return fmt.Sprintf("failed after %v: %v", roundDuration(r.Duration), r.Err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s at version %d", r.Outcome, r.Version)
	if r.Outcome == AuditDivergent {
		fmt.Fprintf(&b, ": %d missing%s, %d extra%s, %d differing%s, %d healed",
			r.Missing, keyList(r.MissingKeys), r.Extra, keyList(r.ExtraKeys), r.Differing, keyList(r.DifferingKeys), r.Healed)
	}
	fmt.Fprintf(&b, ", %d in flight, %d rows in %v", r.InFlight, r.Rows, roundDuration(r.Duration))
	return b.String()
}

func keyList(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return " [" + strings.Join(keys, " ") + "]"
}

// ErrAuditUnsupported is matched by the Err of every audit run of an
// informer whose driver.ListerWatcher does not implement driver.AuditLister.
var ErrAuditUnsupported = fmt.Errorf("dbinformer: the source cannot be audited (its ListerWatcher implements no core.AuditLister)")

// AuditMetrics is implemented by an InformerMetrics that records audit
// runs (metrics/prometheus, the status page). It is an interface of its
// own so that InformerMetrics implementations written before the audit
// keep compiling.
type AuditMetrics interface {
	Audited(AuditResult)
}

func (t teeMetrics) Audited(r AuditResult) {
	for _, m := range t {
		if a, ok := m.(AuditMetrics); ok {
			a.Audited(r)
		}
	}
}
