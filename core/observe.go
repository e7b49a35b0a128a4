package core

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// errNoHead is Head's error for a source that cannot tell its newest
// version; it matches errors.ErrUnsupported.
var errNoHead = fmt.Errorf("dbinformer: the source cannot tell its head version (its ListerWatcher is no core.HeadReader): %w", errors.ErrUnsupported)

// headReuse is how long one head read answers Head: a status page and a
// Prometheus scrape that look at the same moment cost the source one read.
const headReuse = time.Second

// headCache shares head reads among an informer's observers.
type headCache struct {
	mu       sync.Mutex
	reading  chan struct{} // closed when the read in flight ends; nil when none
	at       time.Time     // when the last read ended
	rv       ResourceVersion
	err      error
	readOnce bool
}

// CheckpointStatus is what an informer's checkpoints are doing
// (InformerOptions.Checkpoint), in SyncStatus.Checkpoints.
type CheckpointStatus struct {
	// Name is the checkpoint's name in its store; Interval how often one
	// is saved while the informer runs (negative: only when a run ends).
	Name     string
	Interval time.Duration
	// Saved is the version of the last checkpoint this process saved, and
	// SavedAt when; zero when none was saved yet (one is saved once the
	// cache has synced and its version has moved).
	Saved   ResourceVersion
	SavedAt time.Time
	// LastError is the last failed save or unusable load, and
	// LastErrorAt when; nil once a later save succeeded.
	LastError   error
	LastErrorAt time.Time
}

// checkpointStatus returns the checkpoints' status, nil when they are off.
func (i *SharedIndexInformer[T]) checkpointStatus() *CheckpointStatus {
	o := i.opts.Checkpoint
	if o == nil {
		return nil
	}
	st := &CheckpointStatus{Name: o.Name, Interval: o.Interval}
	if st.Name == "" {
		st.Name = i.name
	}
	if st.Interval == 0 {
		st.Interval = time.Minute
	}
	i.mu.Lock()
	c := i.ckpt
	i.mu.Unlock()
	if c == nil {
		return st
	}
	c.statMu.Lock()
	defer c.statMu.Unlock()
	if c.wrote && !c.savedAt.IsZero() {
		st.Saved, st.SavedAt = c.saved, c.savedAt
	}
	st.LastError, st.LastErrorAt = c.lastErr, c.lastErrAt
	return st
}

// String says in one line what the checkpoints are doing, for example
// "saved version 812 at 10:04:05, every 1m0s".
func (s *CheckpointStatus) String() string {
	if s == nil {
		return "off"
	}
	every := "every " + s.Interval.String()
	if s.Interval < 0 {
		every = "saved when a run ends"
	}
	out := fmt.Sprintf("none saved yet (%s; one is saved once the cache has synced)", every)
	if !s.SavedAt.IsZero() {
		out = fmt.Sprintf("saved version %d at %s, %s", s.Saved, s.SavedAt.UTC().Format(time.TimeOnly), every)
	}
	if s.LastError != nil {
		out += fmt.Sprintf("; last failure at %s: %v", s.LastErrorAt.UTC().Format(time.TimeOnly), s.LastError)
	}
	return out
}
