package statuspage

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// PrintProgress prints the initial sync of every informer on the page to
// w (a terminal, a log): at once and then every `every` (0 means 1s), one
// line per informer still syncing, and one line per informer when it has
// synced:
//
//	users   [########------------]  2,048 of ~5,000 objects (41%), 1,980/s, about 1s left
//	users   synced: 5,000 objects, after 2.6s
//
// It returns nil once every informer on the page has synced, or ctx's
// error when ctx ends first. A page without informers returns at once.
// Call it beside WaitForCacheSync:
//
//	go page.PrintProgress(ctx, os.Stderr, time.Second)
//	err := core.WaitForCacheSyncTimeout(ctx, time.Minute, informers...)
func (p *Page) PrintProgress(ctx context.Context, w io.Writer, every time.Duration) error {
	if every <= 0 {
		every = time.Second
	}
	start := p.clk.Now()
	done := map[string]bool{}
	for {
		st := p.snapshot(ctx, false)
		width := 0
		for _, is := range st.Informers {
			width = max(width, len(is.Name))
		}
		all := true
		var b strings.Builder
		for _, is := range st.Informers {
			if done[is.Name] {
				continue
			}
			if is.Synced {
				done[is.Name] = true
				fmt.Fprintf(&b, "%-*s  synced: %s objects, after %s\n", width, is.Name,
					thousands(int64(is.Lists.ListedObjects)), shortDuration(p.clk.Since(start).Seconds()))
				continue
			}
			all = false
			fmt.Fprintf(&b, "%-*s  %s\n", width, is.Name, progressLine(is))
		}
		if b.Len() > 0 {
			if _, err := io.WriteString(w, b.String()); err != nil {
				return err
			}
		}
		if all {
			return nil
		}
		t := p.clk.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

// progressLine is one informer's sync progress on a terminal.
func progressLine(is InformerStatus) string {
	const bar = 20
	pr := is.Progress
	if pr == nil {
		return "waiting: " + is.NotSyncedReason
	}
	var s string
	if pr.Percent != nil {
		filled := int(*pr.Percent / 100 * bar)
		s = fmt.Sprintf("[%s%s]  ", strings.Repeat("#", filled), strings.Repeat("-", bar-filled))
	} else {
		s = "[" + strings.Repeat("?", bar) + "]  "
	}
	s += progressText(pr)
	if is.Lists.LastError != "" {
		s += "; last list error: " + is.Lists.LastError
	}
	return s
}
