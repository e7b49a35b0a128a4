package statuspage

import (
	"context"
	"errors"
	"sync"
	"time"
)

// readHeads reads the head of every source due for a read, in parallel.
func (p *Page) readHeads(ctx context.Context, entries []*informerEntry) {
	var wg sync.WaitGroup
	for _, e := range entries {
		p.mu.Lock()
		h := e.inf
		p.mu.Unlock()
		if h == nil {
			continue
		}
		e.headMu.Lock()
		due := !e.noHead && (!e.headRead || p.clk.Since(e.headAt) >= p.opts.HeadInterval)
		if due {
			// Claim the read so that concurrent snapshots do not repeat it.
			e.headRead, e.headAt = true, p.clk.Now()
		}
		e.headMu.Unlock()
		if !due {
			continue
		}
		wg.Go(func() {
			hctx, cancel := context.WithTimeout(ctx, p.opts.HeadTimeout)
			rv, err := h.Head(hctx)
			cancel()
			now := p.clk.Now()
			e.headMu.Lock()
			if err != nil && ctx.Err() != nil {
				// The request went away: not the source's failure; read
				// again next time.
				e.headRead = false
				e.headAt = time.Time{}
				e.headMu.Unlock()
				return
			}
			switch {
			case errors.Is(err, errors.ErrUnsupported):
				e.noHead, e.headOK = true, false
			case err != nil:
				// The lag is unknown from now on, not what it was at
				// the last good read.
				e.headErr, e.headOK = describeError(err), false
				if e.failedAt.IsZero() {
					e.failedAt = now
				}
			default:
				e.head, e.headErr, e.headOK, e.failedAt = rv, "", true, time.Time{}
			}
			e.headMu.Unlock()
			if err == nil {
				e.rec.sawHead(rv, now)
			}
		})
	}
	wg.Wait()
}

// Run reads the head of every source on the page every
// Options.HeadInterval until ctx ends, and returns ctx's error. It is
// optional: without it heads are read only when the page, the JSON or a
// probe is served, which is enough for the lag in versions but makes the
// lag in seconds only as fine as those reads are frequent. With it, the lag
// in seconds is accurate to HeadInterval whether anyone looks or not.
func (p *Page) Run(ctx context.Context) error {
	every := p.opts.HeadInterval
	if every <= 0 {
		every = time.Second
	}
	t := p.clk.NewTicker(every)
	defer t.Stop()
	for {
		p.mu.Lock()
		entries := make([]*informerEntry, 0, len(p.order))
		for _, n := range p.order {
			entries = append(entries, p.informers[n])
		}
		p.mu.Unlock()
		p.readHeads(ctx, entries)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
	}
}
