package heal

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dbinformer/dbinformer/core/driver"
)

// Options paces Wait and names what it probes.
type Options struct {
	// First is the wait after the first failed probe; it grows by half
	// each time up to Max.
	First, Max time.Duration
	// Timeout bounds each probe, so that a hanging connection (a frozen
	// server) does not hold the wait.
	Timeout time.Duration
	// What names the server in the log ("etcd", "the apiserver").
	What string
	// Log receives a debug line per failed probe and when the server
	// answers again.
	Log *slog.Logger
	// Down reports, when a probe answers at once, whether the failure
	// being waited out was an outage all the same (the server was
	// unreachable and came back just before the first probe: a restart
	// that ended, a failure at the very instant of a heal). Nil means no.
	Down func() bool
}

// ErrNotDown is what Wait returns when the first probe succeeds and
// Options.Down does not say the server was down: the failure being waited
// out was not an outage, and the caller keeps its backoff (retrying at once
// after failures the server answers is what a backoff prevents).
var ErrNotDown = errors.New("the server answers: no outage to wait out")

// Wait probes until a probe succeeds after at least one failed (nil: the
// server, or the path to it, was down and is back), or the first succeeds
// (nil when Options.Down says it was down all the same, else ErrNotDown).
// A probe error matching driver.ErrPermanent is returned as is, and
// driver.Stopped(ctx) when ctx ends first.
func Wait(ctx context.Context, probe func(context.Context) error, o Options) error {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	delay := o.First
	for probes := 0; ; probes++ {
		pctx, cancel := context.WithTimeout(ctx, o.Timeout)
		err := probe(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return driver.Stopped(ctx)
		case err == nil && probes == 0:
			if o.Down != nil && o.Down() {
				log.DebugContext(ctx, o.What+" answers again (it was down just before)")
				return nil
			}
			return ErrNotDown
		case err == nil:
			log.DebugContext(ctx, o.What+" answers again", "probes", probes+1)
			return nil
		case errors.Is(err, driver.ErrPermanent):
			return err
		}
		log.DebugContext(ctx, o.What+" does not answer yet", "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return driver.Stopped(ctx)
		case <-t.C:
		}
		delay = min(delay*3/2, o.Max)
	}
}
