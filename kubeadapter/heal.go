package kubeinformer

import (
	"context"
	"time"

	"github.com/dbinformer/dbinformer/internal/heal"
)

const (
	// healFirstProbe and healMaxProbe pace WaitHealed's probes: often at
	// first, when a restart is most likely to end, then every 2s.
	healFirstProbe = 200 * time.Millisecond
	healMaxProbe   = 2 * time.Second
	// healProbeTimeout bounds one probe, so that a connection that hangs
	// (a frozen server) does not hold the wait, nor client-go's own retries
	// of a GET whose connection ended (about one a second while a proxy
	// in front of the apiserver accepts and closes connections).
	healProbeTimeout = 2 * time.Second
)

// WaitHealed implements driver.HealWaiter: an informer backing off after a
// failed List or Watch runs it beside its sleep, and retries at once when it
// returns nil, instead of finishing a sleep that can last tens of seconds
// after the apiserver is back.
//
// It probes the apiserver with the same consistent one-object list as Head
// (each bounded to 2s): at once, then after 200ms, growing to every 2s. It
// returns nil when a probe succeeds after at least one failed, that is when
// the apiserver (or the path to it) was down and is back. It returns an
// error when the first probe succeeds (the failure was not an outage, and
// retrying at once after failures the server answers again and again is
// what a backoff prevents), an error matching driver.ErrPermanent when the
// resource is not served any more, and driver.Stopped(ctx) when ctx ends
// first. It logs each failed probe at debug level with its error.
func (r *Resource[T]) WaitHealed(ctx context.Context) error {
	return heal.Wait(ctx, func(ctx context.Context) error {
		_, err := r.Head(ctx)
		return err
	}, heal.Options{First: healFirstProbe, Max: healMaxProbe, Timeout: healProbeTimeout, What: "kubeinformer: the apiserver", Log: r.log})
}
