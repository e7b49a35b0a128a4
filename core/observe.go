package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core/driver"
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

// Head returns the newest version of the informer's source (driver.HeadReader,
// found through wrappers by driver.Capability), for lag: AppliedVersion's
// distance to it. Calls within a second of a finished read get that
// read's answer, and concurrent calls share one read, so every observer
// of the informer (a status page, Prometheus) reads through it at no extra
// cost to the source. When the source cannot tell its head, the error
// matches errors.ErrUnsupported.
func (i *SharedIndexInformer[T]) Head(ctx context.Context) (ResourceVersion, error) {
	h, ok := driver.Capability[driver.HeadReader](i.lw)
	if !ok {
		return 0, errNoHead
	}
	c := &i.head
	for {
		c.mu.Lock()
		if c.readOnce && c.reading == nil && i.clk.Since(c.at) < headReuse {
			rv, err := c.rv, c.err
			c.mu.Unlock()
			return rv, err
		}
		if wait := c.reading; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		done := make(chan struct{})
		c.reading = done
		c.mu.Unlock()
		rv, err := h.Head(ctx)
		c.mu.Lock()
		c.reading = nil
		close(done)
		// A read that ended because its caller gave up says nothing about
		// the source: the next caller reads again.
		if ctx.Err() == nil || err == nil {
			c.rv, c.err, c.at, c.readOnce = rv, err, i.clk.Now(), true
		}
		c.mu.Unlock()
		if err != nil {
			return 0, fmt.Errorf("%s: read the source's head: %w", i.name, err)
		}
		return rv, nil
	}
}

// Source names the kind of the informer's source: the Go type of the
// driver.ListerWatcher beneath any wrappers (see driver.Capability), without package
// path or type arguments, such as "etcdinformer.Prefix" for an
// *etcdinformer.Prefix[User] inside a filter.Wrap (what SyncStatus.Source
// holds).
func (i *SharedIndexInformer[T]) Source() string {
	lw := i.lw
	for range 64 {
		next := driver.Unwrap(lw)
		if next == nil {
			break
		}
		lw = next
	}
	t := reflect.TypeOf(lw)
	if t == nil {
		return ""
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s := t.String()
	if j := strings.IndexByte(s, '['); j >= 0 {
		s = s[:j]
	}
	return s
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
