package statuspage

import (
	"time"

	"github.com/dbinformer/dbinformer/core"
)

// AuditStatus is an informer's consistency audit (core.InformerOptions.Audit):
// how many runs the metrics saw, and the last run's result as the
// informer holds it (core.SyncStatus.Audit). It names keys, never values,
// and runs them through Redact like every other name on the page.
type AuditStatus struct {
	// Runs by outcome, counted from InformerMetrics (0 when the page is
	// not the informer's metrics).
	Runs      int64 `json:"runs"`
	Divergent int64 `json:"divergent"`
	Failed    int64 `json:"failed"`
	// The last run.
	Outcome   string    `json:"outcome"`
	At        time.Time `json:"at"`
	Version   uint64    `json:"version"`
	Missing   int64     `json:"missing"`
	Extra     int64     `json:"extra"`
	Differing int64     `json:"differing"`
	Healed    int64     `json:"healed"`
	InFlight  int64     `json:"inFlight"`
	Rows      int64     `json:"rows"`
	Seconds   float64   `json:"seconds"`
	// Summary is the last run in one line (core.AuditResult.String), with
	// the first few keys of each kind.
	Summary string `json:"summary"`
}

// auditRecord counts the runs the metrics reported.
type auditRecord struct{ runs, divergent, failed int64 }

// Audited implements core.AuditMetrics.
func (r *informerRecord) Audited(res core.AuditResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.audit.runs++
	switch res.Outcome {
	case core.AuditDivergent:
		r.audit.divergent++
	case core.AuditFailed:
		r.audit.failed++
	}
}

var _ core.AuditMetrics = (*informerRecord)(nil)

// auditStatus is the page's view of the last run; nil when none ran.
func auditStatus(res *core.AuditResult, rec auditRecord) *AuditStatus {
	if res == nil {
		return nil
	}
	return &AuditStatus{
		Runs: rec.runs, Divergent: rec.divergent, Failed: rec.failed,
		Outcome: string(res.Outcome), At: res.Started, Version: uint64(res.Version),
		Missing: res.Missing, Extra: res.Extra, Differing: res.Differing, Healed: res.Healed,
		InFlight: res.InFlight, Rows: res.Rows, Seconds: res.Duration.Seconds(),
		Summary: clip(Redact(res.String()), maxMessage),
	}
}
