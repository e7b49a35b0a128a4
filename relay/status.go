package relay

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/leader"
)

// Name is the relay's name on a status page and in metrics
// (Options.Name, or the stream's).
func (r *Relay[T]) Name() string { return r.name }

// RelayStatus returns where the relay stands (statuspage.Page.AddRelay
// and prommetrics.Provider.TrackRelay read it): its part in the election
// and its counters, then the stream's last message (the term writing it,
// its sequence and the last source version it holds completely) and the
// source's head (through driver.HeadReader, when the source has one), each
// read once, bounded by ctx; a read that fails leaves its error in the
// status instead.
func (r *Relay[T]) RelayStatus(ctx context.Context) core.RelayStatus {
	st := r.status.get()
	st.Leading = r.leading.Load()
	st.Published = r.published.Load()
	st.Relists = r.relists.Load()
	st.Repairs = r.repairs.Load()
	if e, ok, err := r.down.last(ctx); err != nil {
		st.StreamError = err.Error()
	} else if ok {
		st.StreamEpoch, st.StreamSequence, st.StreamVersion = e.epoch, e.seq, core.ResourceVersion(e.committed())
	}
	if hr, ok := driver.Capability[driver.HeadReader](r.src); ok {
		switch h, err := hr.Head(ctx); {
		case errors.Is(err, errors.ErrUnsupported):
		case err != nil:
			st.HeadError = err.Error()
		default:
			st.Head, st.HasHead = h, true
		}
	}
	return st
}

// relayState is the part of a RelayStatus the relay's goroutines set.
type relayState struct {
	mu sync.Mutex
	st core.RelayStatus
}

func (s *relayState) get() core.RelayStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *relayState) leading(t leader.Term, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Identity, s.st.Epoch = t.Identity, t.Epoch
	if on {
		s.st.Terms++
		s.st.LeadingSince = time.Now()
	} else {
		s.st.LeadingSince = time.Time{}
	}
}

func (s *relayState) stored(v uint64) {
	s.mu.Lock()
	s.st.Stored = core.ResourceVersion(v)
	s.mu.Unlock()
}

func (s *relayState) restarted(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.TermRestarts++
	s.st.LastError, s.st.LastErrorAt = err.Error(), time.Now()
}
