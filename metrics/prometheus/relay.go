package prommetrics

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbinformer/dbinformer/core"
)

// Relay is what TrackRelay reads of a relay (package relay): every
// *relay.Relay[T] is one, whatever T.
type Relay interface {
	Name() string
	RelayStatus(ctx context.Context) core.RelayStatus
}

// relayCollector reads the tracked relays' status at scrape time (one
// read each, in parallel, bounded by Options.HeadTimeout).
type relayCollector struct {
	p *Provider

	leading, epoch, terms, published, stored     *prometheus.Desc
	relists, repairs, restarts                   *prometheus.Desc
	streamSeq, streamRV, streamErrors, head, lag *prometheus.Desc
	headErrors                                   *prometheus.Desc
}

func newRelayCollector(p *Provider, ns string, cl prometheus.Labels) *relayCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "relay", name), help, []string{"relay"}, cl)
	}
	return &relayCollector{p: p,
		leading:      d("leading", "1 while this relay leads (reads the source and publishes), 0 while it follows."),
		epoch:        d("epoch", "The epoch of this relay's current term (leading) or last term; 0 if it never led."),
		terms:        d("terms_total", "Election terms this relay led."),
		published:    d("published_messages_total", "Messages this relay published and JetStream acknowledged."),
		stored:       d("stored_resource_version", "The source version up to which JetStream stored everything this relay published (what the source was told it may discard)."),
		relists:      d("relists_total", "Relists of the source this relay published."),
		repairs:      d("repairs_total", "Repairs of the relay stream from the source, without a relist (a deposed leader's late write, or a broken chain)."),
		restarts:     d("term_restarts_total", "Terms that failed and started again from the stream."),
		streamSeq:    d("stream_sequence", "The relay stream's last sequence, read at scrape time."),
		streamRV:     d("stream_resource_version", "The last source version the relay stream holds completely, read at scrape time."),
		streamErrors: d("stream_errors_total", "Failed reads of the relay stream's last message during a scrape."),
		head:         d("head_resource_version", "The source's newest version, read through the relay at scrape time."),
		lag:          d("lag", "Source head version minus the stream's, read at scrape time, in the source's units: how far the stream trails the source."),
		headErrors:   d("head_errors_total", "Failed reads of the source's head through the relay during a scrape."),
	}
}

func (c *relayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leading, c.epoch, c.terms, c.published, c.stored, c.relists, c.repairs, c.restarts,
		c.streamSeq, c.streamRV, c.streamErrors, c.head, c.lag, c.headErrors} {
		ch <- d
	}
}

func (c *relayCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	p.mu.Lock()
	type tracked struct {
		r     Relay
		state *relayErrors
	}
	list := make(map[string]tracked, len(p.relays))
	for name, r := range p.relays {
		list[name] = tracked{r, p.relayErrs[name]}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for name, t := range list {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), p.headTimeout)
			st := t.r.RelayStatus(ctx)
			cancel()
			g := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
			}
			n := func(d *prometheus.Desc, v uint64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
			}
			leading := 0.0
			if st.Leading {
				leading = 1
			}
			g(c.leading, leading)
			g(c.epoch, float64(st.Epoch))
			n(c.terms, st.Terms)
			n(c.published, st.Published)
			g(c.stored, float64(st.Stored))
			n(c.relists, st.Relists)
			n(c.repairs, st.Repairs)
			n(c.restarts, st.TermRestarts)
			if st.StreamError == "" {
				g(c.streamSeq, float64(st.StreamSequence))
				g(c.streamRV, float64(st.StreamVersion))
			}
			if st.HasHead {
				g(c.head, float64(st.Head))
			}
			if lag, ok := st.Lag(); ok {
				g(c.lag, float64(lag))
			}
			n(c.streamErrors, t.state.note(&t.state.stream, st.StreamError != ""))
			n(c.headErrors, t.state.note(&t.state.head, st.HeadError != ""))
		})
	}
	wg.Wait()
}

// relayErrors counts a relay's failed reads across scrapes.
type relayErrors struct {
	mu           sync.Mutex
	stream, head uint64
}

func (e *relayErrors) note(n *uint64, failed bool) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if failed {
		*n++
	}
	return *n
}

// TrackRelay makes every scrape read r's status (RelayStatus: one read of
// the relay stream's last message and of the source's head, bounded by
// Options.HeadTimeout) and report it under r's name:
//
//	dbinformer_relay_leading, _epoch, _terms_total
//	dbinformer_relay_published_messages_total, _stored_resource_version
//	dbinformer_relay_relists_total, _repairs_total, _term_restarts_total
//	dbinformer_relay_stream_sequence, _stream_resource_version
//	dbinformer_relay_head_resource_version, _lag
//	dbinformer_relay_stream_errors_total, _head_errors_total
//
// A stream or head that cannot be read has no sample (and no lag): unknown,
// never 0. A later call for a relay of the same name replaces it;
// UntrackRelay stops tracking.
func (p *Provider) TrackRelay(r Relay) {
	name := r.Name()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.relays[name] = r
	if p.relayErrs[name] == nil {
		p.relayErrs[name] = &relayErrors{}
	}
}

// UntrackRelay stops reporting the relay called name.
func (p *Provider) UntrackRelay(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.relays, name)
	delete(p.relayErrs, name)
}
