package statuspage

import (
	"context"
	"slices"
	"sync"

	"github.com/dbinformer/dbinformer/core"
)

// Relay is what the page reads of a relay (package relay): every
// *relay.Relay[T] is one, whatever T. RelayStatus reads the relay stream's
// last message and the source's head, bounded by ctx.
type Relay interface {
	Name() string
	RelayStatus(ctx context.Context) core.RelayStatus
}

// RelayStatus is one relay's state as the page shows it: core.RelayStatus
// (leader or follower, term, what it published and had stored, the
// stream's last message, the source's head) with its name, its role and
// the lag, every name and message redacted.
type RelayStatus struct {
	Name string `json:"name"`
	// Role is "leader" or "follower".
	Role string `json:"role"`
	core.RelayStatus
	// LagVersions is Head − StreamVersion, in the source's version units:
	// how far the stream trails the source; absent while either is
	// unknown.
	LagVersions *uint64 `json:"lagVersions,omitempty"`
}

// AddRelay shows r on the page under its name (a second relay of the same
// name replaces the first). Its status is read whenever the page or its
// JSON is served, each read bounded by Options.HeadTimeout; the probes do
// not read it.
func (p *Page) AddRelay(r Relay) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name := r.Name()
	if p.relays == nil {
		p.relays = map[string]Relay{}
	}
	if _, ok := p.relays[name]; !ok {
		p.rorder = append(p.rorder, name)
	}
	p.relays[name] = r
}

// RemoveRelay takes the relay called name off the page.
func (p *Page) RemoveRelay(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.relays, name)
	p.rorder = slices.DeleteFunc(p.rorder, func(n string) bool { return n == name })
}

// relayStatuses reads every relay's status, in parallel.
func (p *Page) relayStatuses(ctx context.Context) []RelayStatus {
	p.mu.Lock()
	names := slices.Clone(p.rorder)
	rs := make([]Relay, len(names))
	for i, n := range names {
		rs[i] = p.relays[n]
	}
	p.mu.Unlock()
	out := make([]RelayStatus, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, p.opts.HeadTimeout)
			defer cancel()
			out[i] = relayStatus(names[i], r.RelayStatus(rctx))
		})
	}
	wg.Wait()
	return out
}

func relayStatus(name string, st core.RelayStatus) RelayStatus {
	rs := RelayStatus{Name: Redact(name), Role: "follower", RelayStatus: st}
	if st.Leading {
		rs.Role = "leader"
	}
	rs.Identity = Redact(st.Identity)
	rs.LastError = Redact(st.LastError)
	rs.StreamError = Redact(st.StreamError)
	rs.HeadError = Redact(st.HeadError)
	if lag, ok := st.Lag(); ok {
		v := uint64(lag)
		rs.LagVersions = &v
	}
	return rs
}
