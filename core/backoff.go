package core

import (
	"math/rand/v2"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

// Backoff configures the delay between failed attempts to list or watch:
// exponential with jitter, and back to Initial as soon as the source makes
// progress again. A watch that moved the version forward (a change or a
// bookmark), or that ran for Reset, counts as progress, so that one
// failure after a healthy stretch is retried promptly; a source that fails
// at once, again and again, climbs the ladder to Max. A successful list
// alone is not progress: a list whose watch expires at once must not be
// repeated in a tight loop.
//
// The zero value means the defaults: 200ms, doubling, at most 5s, jitter
// 0.5, back to Initial after a minute without failure. ClientGoBackoff is
// client-go's reflector policy, for those who want it.
type Backoff struct {
	Initial time.Duration
	// Max bounds every delay, jitter included.
	Max    time.Duration
	Factor float64
	// Jitter spreads each delay over [d, d×(1+Jitter)] (and, near Max, over
	// [Max/(1+Jitter), Max]), so that many informers that failed together
	// do not retry together. 0 means the default 0.5; a negative value
	// means no jitter.
	Jitter float64
	// Reset is how long without a failure (or how long a watch must run)
	// to bring the delay back to Initial.
	Reset time.Duration
}

// ClientGoBackoff is client-go's reflector backoff: 800ms doubling to 30s,
// jitter 1.0, reset after 2 minutes without a failure. Unlike client-go,
// jitter never takes a delay past Max, and progress resets the ladder.
var ClientGoBackoff = Backoff{
	Initial: 800 * time.Millisecond,
	Max:     30 * time.Second,
	Factor:  2,
	Jitter:  1,
	Reset:   2 * time.Minute,
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 200 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Second
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.Factor < 1 {
		b.Factor = 2
	}
	if b.Jitter < 0 {
		b.Jitter = 0
	} else if b.Jitter == 0 {
		b.Jitter = 0.5
	}
	if b.Reset <= 0 {
		b.Reset = time.Minute
	}
	return b
}

// backoffState is not safe for concurrent use: one reflector loop owns it.
type backoffState struct {
	cfg         Backoff
	clock       clock.Clock
	current     time.Duration // the last step of the ladder; 0 before any failure
	lastFailure time.Time
	rand        func() float64
}

func newBackoffState(cfg Backoff, c clock.Clock) *backoffState {
	return &backoffState{cfg: cfg.withDefaults(), clock: c, rand: rand.Float64}
}

// progress records that the source made progress: the next failure starts
// the ladder again at Initial.
func (b *backoffState) progress() { b.current = 0 }

// next records a failure and returns how long to wait before retrying.
func (b *backoffState) next() time.Duration {
	now := b.clock.Now()
	if b.current == 0 || now.Sub(b.lastFailure) >= b.cfg.Reset {
		b.current = b.cfg.Initial
	} else {
		b.current = min(time.Duration(float64(b.current)*b.cfg.Factor), b.cfg.Max)
	}
	b.lastFailure = now
	if b.cfg.Jitter == 0 {
		return b.current
	}
	// Spread upwards from the step, but never past Max: near the cap the
	// spread moves down instead of being cut off.
	low := min(float64(b.current), float64(b.cfg.Max)/(1+b.cfg.Jitter))
	return min(time.Duration(low*(1+b.rand()*b.cfg.Jitter)), b.cfg.Max)
}
