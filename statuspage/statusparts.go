package statuspage

import (
	"cmp"
	"slices"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// fromInformer is what a registered informer says of itself
// (SyncStatus), read before the record's lock is taken (see
// informerStatus); the zero value for an informer not on the page.
type fromInformer struct {
	synced            bool
	applied, received core.ResourceVersion
	listErr, stopped  error
	decodeErr         *driver.DecodeError
	decodeAt          time.Time
	audit             *core.AuditResult
}

// askInformer reads inf's SyncStatus: the parts of is it fills alone, and
// the rest, which informerStatus weighs against the record.
func askInformer(inf Informer, is *InformerStatus) fromInformer {
	st := inf.SyncStatus()
	var fi fromInformer
	fi.decodeErr, fi.decodeAt = st.LastDecodeError, st.LastDecodeErrorAt
	fi.audit = st.Audit
	is.SchemaChanges = schemaChangeStatus(st.SchemaChanges)
	is.Kind = Redact(st.Source)
	fi.synced, fi.applied, fi.received = st.Synced, st.AppliedVersion, st.LastSyncResourceVersion
	fi.listErr, fi.stopped = st.ListFailures.Last, st.Stopped
	is.Checkpoints = Redact(st.Checkpoints.String())
	if st.Checkpoints == nil {
		is.Checkpoints = "off (InformerOptions.Checkpoint is not set: every start lists)"
	}
	return fi
}

// What informerStatus reads from an informer's record, a part each; every
// one runs with r.mu held.

// countsLocked fills the record's counters into is (lists, list progress,
// watch restarts, decode errors), preferring the informer's own last list
// error and a decode error newer than the record's. r.mu is held.
func (r *informerRecord) countsLocked(is *InformerStatus, fi fromInformer, now time.Time) {
	is.Lists = ListStats{
		Lists: r.lists, ListErrors: r.listErrors, Relists: r.relists, RelistErrors: r.relistErrors,
		ListedObjects: r.listed, LastAt: timePtr(r.lastListAt),
		LastError: r.lastListErr, LastErrorAt: timePtr(r.lastListErrAt),
	}
	if fi.listErr != nil {
		is.Lists.LastError = describeError(fi.listErr)
	}
	is.Progress = r.progressLocked(now)
	is.WatchRestarts = RestartStats{
		Total:   r.restartsTimeout + r.restartsExpired + r.restartsError,
		Timeout: r.restartsTimeout, Expired: r.restartsExpired, Error: r.restartsError,
		LastReason: r.lastRestartReason, LastAt: timePtr(r.lastRestartAt),
	}
	is.DecodeErrors = DecodeStats{Count: r.decodeErrors, Last: r.lastDecodeErr, LastAt: timePtr(r.lastDecodeErrAt)}
	if fi.decodeErr != nil && !fi.decodeAt.Before(r.lastDecodeErrAt) {
		is.DecodeErrors.Last, is.DecodeErrors.LastAt = describeDecodeError(fi.decodeErr), timePtr(fi.decodeAt)
	}
}

// stuckSinceLocked notes the applied version's last move, as the metrics
// (registered: the informer's own) or the page saw it, and returns since
// when the informer is stuck: the later of that move and the first time
// the page saw it behind what it received. r.mu is held.
func (r *informerRecord) stuckSinceLocked(registered bool, applied, received core.ResourceVersion, now time.Time) time.Time {
	if applied != r.applied || r.appliedChangedAt.IsZero() {
		if registered && applied != r.applied {
			r.applied, r.appliedChangedAt = applied, now
		} else if r.appliedChangedAt.IsZero() {
			r.appliedChangedAt = now
		}
	}
	if received > applied {
		if r.behindSince.IsZero() {
			r.behindSince = now
		}
	} else {
		r.behindSince = time.Time{}
	}
	if r.behindSince.After(r.appliedChangedAt) {
		return r.behindSince
	}
	return r.appliedChangedAt
}

// lagLocked is the source's head and how far the cache is behind it, in
// versions and in seconds; r.mu is held.
func (r *informerRecord) lagLocked(head, applied core.ResourceVersion, now time.Time) (headVersion, versions *uint64, seconds *float64) {
	h := uint64(head)
	lag := uint64(0)
	if head > applied {
		lag = uint64(head - applied)
	}
	secs := 0.0
	if since, ok := r.lagSinceLocked(applied); ok {
		secs = now.Sub(since).Seconds()
	}
	return &h, &lag, &secs
}

// progressLocked is the list under way, if any; r.mu is held.
func (r *informerRecord) progressLocked(now time.Time) *Progress {
	if !r.listing {
		return nil
	}
	pr := &Progress{
		Relist:         r.listedOnce,
		Received:       r.listReceived,
		Estimated:      r.listEstimated,
		StartedAt:      r.listStart,
		LastReportAt:   r.listLastAt,
		ElapsedSeconds: now.Sub(r.listStart).Seconds(),
	}
	if pr.Estimated > 0 {
		pc := min(100, 100*float64(pr.Received)/float64(pr.Estimated))
		pr.Percent = &pc
	}
	if el := pr.ElapsedSeconds; el > 0 && r.listReceived > r.listStartCount {
		pr.RatePerSecond = float64(r.listReceived-r.listStartCount) / el
		if pr.Estimated > pr.Received {
			eta := float64(pr.Estimated-pr.Received) / pr.RatePerSecond
			pr.ETASeconds = &eta
		}
	}
	return pr
}

// handlersLocked is the handlers' state, the most behind first; r.mu is
// held.
func (r *informerRecord) handlersLocked() []HandlerStatus {
	hs := make([]HandlerStatus, 0, len(r.handlers))
	for name, h := range r.handlers {
		hs = append(hs, HandlerStatus{Name: Redact(name), Pending: h.pending, PeakPending: h.peak, Panics: h.panics})
	}
	slices.SortFunc(hs, func(a, b HandlerStatus) int {
		return cmp.Or(cmp.Compare(b.Pending, a.Pending), cmp.Compare(a.Name, b.Name))
	})
	return hs
}

// notSyncedReasonLocked says why an informer is not synced, from what is
// shows of it so far (Progress and Lists set); r.mu is held.
func (r *informerRecord) notSyncedReasonLocked(is *InformerStatus, registered bool, permanent string) string {
	switch {
	case permanent != "":
		return "failed permanently: " + permanent
	case is.Progress != nil && !is.Progress.Relist:
		why := "listing: " + progressText(is.Progress)
		if is.Lists.LastError != "" {
			why += "; last list error: " + is.Lists.LastError
		}
		return why
	case is.Lists.LastError != "":
		return "last list error: " + is.Lists.LastError
	case registered && r.lists > 0:
		return "the list has finished; its objects are being applied"
	case !r.metrics && !registered:
		return "unknown informer"
	case r.metrics:
		return "waiting for the first list (no progress reported yet)"
	}
	return "no list has finished yet"
}
