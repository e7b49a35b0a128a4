package kubeinformer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
)

const (
	// healFirstProbe and healMaxProbe pace the probes: often at first,
	// when a restart is most likely to end, then every 2s.
	healFirstProbe = 200 * time.Millisecond
	healMaxProbe   = 2 * time.Second
	// healProbeTimeout bounds one probe, so that a connection that hangs
	// (a frozen server) does not hold the wait, nor client-go's own retries
	// of a GET whose connection ended (about one a second while a proxy
	// in front of the apiserver accepts and closes connections).
	healProbeTimeout = 2 * time.Second
	// healMaxWait bounds a probe that nobody stops (the informer was
	// stopped during an outage): longer than any backoff sleep.
	healMaxWait = time.Minute
)

// errNotDown: the server answered the first probe, so there is no heal to
// signal.
var errNotDown = errors.New("kubeinformer: the apiserver answers: nothing to wait for")

// healer runs at most one probe at a time for a Resource.
type healer struct {
	mu     sync.Mutex
	ch     chan struct{}      // closed when the running probe saw a heal
	cancel context.CancelFunc // stops the running probe; nil if none
	done   chan struct{}      // closed when the running probe has returned
}

// Healed implements core.HealNotifier: the returned channel is closed when
// the apiserver, after failing a probe, answers one again, so that an
// informer backing off after a failure retries at once instead of
// finishing its sleep.
//
// The probes are the consistent one-object list of Head, each bounded to
// 2s: at once, then 200ms later, growing to every 2s. A server that answers
// the first probe was not down (the failure being waited out was something
// else, which a backoff must keep pacing), and the channel is then never
// closed. The probing stops at the Resource's next List or Watch (the
// caller is done waiting), at the first answer, or after a minute; calls
// made meanwhile share it and its channel.
func (r *Resource[T]) Healed() <-chan struct{} {
	h := &r.heal
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		select {
		case <-h.done:
		default:
			return h.ch // a probe is running: share it
		}
	}
	ch, done := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), healMaxWait)
	h.ch, h.cancel, h.done = ch, cancel, done
	go func() {
		defer close(done)
		defer cancel()
		if r.waitHealed(ctx) == nil {
			close(ch)
		}
	}()
	return ch
}

// stopHealing ends a running probe and waits for it: a List or Watch is
// starting, so nobody waits on the channel any more.
func (r *Resource[T]) stopHealing() {
	h := &r.heal
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.cancel, h.done = nil, nil
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// waitHealed probes until the server answers after having failed a probe
// (nil), answers the first probe (errNotDown), is found not to serve the
// resource (an error matching core.ErrPermanent), or ctx ends
// (core.Stopped).
func (r *Resource[T]) waitHealed(ctx context.Context) error {
	delay := healFirstProbe
	for probes := 0; ; probes++ {
		pctx, cancel := context.WithTimeout(ctx, healProbeTimeout)
		_, err := r.Head(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return core.Stopped(ctx)
		case err == nil && probes == 0:
			return errNotDown
		case err == nil:
			r.log.Debug("kubeinformer: the apiserver answers again", "probes", probes+1)
			return nil
		case errors.Is(err, core.ErrPermanent):
			return err
		}
		r.log.Debug("kubeinformer: the apiserver does not answer yet", "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return core.Stopped(ctx)
		case <-t.C:
		}
		delay = min(delay*3/2, healMaxProbe)
	}
}
