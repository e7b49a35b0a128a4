package statuspage

import (
	"cmp"
	"slices"
	"time"

	"github.com/dbinformer/dbinformer/core"
)

// What informerStatus reads from an informer's record, a part each; every
// one runs with r.mu held.

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
