package core

import (
	"math/rand/v2"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

// Backoff configures the delay between failed attempts: exponential with
// jitter, back to Initial after a healthy period. The zero value means
// client-go's reflector defaults (800ms, doubling, at most 30s, jitter 1.0,
// reset after 2 minutes without failure).
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Factor  float64
	// Jitter adds up to Jitter×delay at random, so that many informers
	// that failed together do not retry together. 0 means the default
	// 1.0; a negative value means no jitter.
	Jitter float64
	// Reset is how long without a failure brings the delay back to
	// Initial.
	Reset time.Duration
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 800 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
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
		b.Jitter = 1
	}
	if b.Reset <= 0 {
		b.Reset = 2 * time.Minute
	}
	return b
}

// backoffState is not safe for concurrent use: one reflector loop owns it.
type backoffState struct {
	cfg         Backoff
	clock       clock.Clock
	current     time.Duration
	lastFailure time.Time
	rand        func() float64
}

func newBackoffState(cfg Backoff, c clock.Clock) *backoffState {
	return &backoffState{cfg: cfg.withDefaults(), clock: c, rand: rand.Float64}
}

// next records a failure and returns how long to wait before retrying.
func (b *backoffState) next() time.Duration {
	now := b.clock.Now()
	if b.current == 0 || now.Sub(b.lastFailure) >= b.cfg.Reset {
		b.current = b.cfg.Initial
	} else {
		b.current = time.Duration(float64(b.current) * b.cfg.Factor)
		if b.current > b.cfg.Max {
			b.current = b.cfg.Max
		}
	}
	b.lastFailure = now
	d := b.current
	if b.cfg.Jitter > 0 {
		d += time.Duration(b.rand() * b.cfg.Jitter * float64(d))
	}
	return d
}
