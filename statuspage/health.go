package statuspage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrNotReady is matched by Ready's error; ErrNotLive by Live's.
var (
	ErrNotReady = errors.New("statuspage: not ready")
	ErrNotLive  = errors.New("statuspage: not live")
)

// Ready reports whether every informer on the page has synced: nil, or an
// error matching ErrNotReady that says, for each informer that has not,
// why (listing with its progress, the last list error, a permanent
// failure). A page without informers is ready. Ready does not read the
// sources' heads, so it answers at once.
func (p *Page) Ready(ctx context.Context) error {
	st := p.snapshot(ctx, false)
	if st.Ready {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrNotReady, strings.Join(st.NotReady, "; "))
}

// Live reports whether every informer on the page is alive: nil, or an
// error matching ErrNotLive naming each informer that is not and why.
//
// An informer is live unless its run ended on a permanent failure (a
// dropped table, a deleted bucket: the reflector stopped and nothing will
// restart it) or it has stalled: it received versions it has not applied
// and its applied version has not moved for Options.StallTimeout (a handler
// blocking it through HandlerOptions.MaxPending, a deadlock). A relist, an
// expired version, a watch timeout and a source that is down are not
// failures of liveness: the informer is retrying with backoff, and
// restarting the process would not bring the source back (the page shows
// them under "retrying", and readiness covers the initial sync). So
// liveness does not flap while a source relists or restarts.
func (p *Page) Live(ctx context.Context) error {
	st := p.snapshot(ctx, false)
	if st.Live {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrNotLive, strings.Join(st.NotLive, "; "))
}

// ReadyHandler serves Ready for a Kubernetes readiness probe: 200 and
// "ok" when ready, 503 otherwise, with one line per informer ("[+] users
// synced", "[-] orders: listing: 2,048 of ~5,000 objects (41%)") either
// way, like kube-apiserver's /readyz?verbose. The page serves it under
// readyz too.
func (p *Page) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serveHealth(w, r, true) })
}

// LiveHandler serves Live for a Kubernetes liveness probe, like
// ReadyHandler. The page serves it under livez too.
func (p *Page) LiveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serveHealth(w, r, false) })
}

func (p *Page) serveHealth(w http.ResponseWriter, r *http.Request, ready bool) {
	st := p.snapshot(r.Context(), false)
	var b strings.Builder
	ok := true
	for _, is := range st.Informers {
		good, why, what := is.Synced, is.NotSyncedReason, "synced"
		if !ready {
			good, why, what = is.Live, is.NotLiveReason, "live"
			if good && is.Retrying != "" {
				what = "live (retrying " + is.Retrying + ")"
			}
		}
		if good {
			fmt.Fprintf(&b, "[+] %s %s\n", is.Name, what)
			continue
		}
		ok = false
		fmt.Fprintf(&b, "[-] %s: %s\n", is.Name, why)
	}
	name := "readyz"
	if !ready {
		name = "livez"
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if ok {
		fmt.Fprintf(&b, "%s check passed\n", name)
		w.WriteHeader(http.StatusOK)
	} else {
		fmt.Fprintf(&b, "%s check failed\n", name)
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(b.String()))
	}
}
