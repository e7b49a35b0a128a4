package core

import (
	"context"
	"time"
)

// pacer spaces the audit's reads to at most rate objects per second,
// sleeping once per batch of objects rather than per object.
type pacer struct {
	i interface {
		sleep(context.Context, time.Duration) error
	}
	rate  float64
	start time.Time
	n     int64
	now   func() time.Time
}

func newPacer[T any](i *SharedIndexInformer[T], rate float64) *pacer {
	return &pacer{rate: rate, now: i.clk.Now, i: sleeperFunc(func(ctx context.Context, d time.Duration) error {
		t := i.clk.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})}
}

type sleeperFunc func(context.Context, time.Duration) error

func (f sleeperFunc) sleep(ctx context.Context, d time.Duration) error { return f(ctx, d) }

func (p *pacer) wait(ctx context.Context) error {
	if p.rate <= 0 {
		return nil
	}
	if p.n == 0 {
		p.start = p.now()
	}
	p.n++
	if p.n%64 != 0 {
		return nil
	}
	due := p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))
	if d := due.Sub(p.now()); d > 0 {
		return p.i.sleep(ctx, d)
	}
	return nil
}
