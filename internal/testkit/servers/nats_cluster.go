package servers

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSCluster is a JetStream cluster of real nats-servers embedded in the
// test process: cluster routes on loopback, a file store per node, random
// ports that stay the same across a node's Restart.
//
// The last node's routes all go through delaying proxies (DelayProxy):
// the other nodes route to each other directly and to the last node only
// through its proxy, and the last node reaches them only through theirs.
// LagLast sets the delay, making that node a lagging replica (it stores
// what the others agree on later than they do) without cutting it off.
type NATSCluster struct {
	tb    testing.TB
	Nodes []*NATS
	lag   []*DelayProxy
}

// StartNATSCluster starts a cluster of n nodes (n >= 3 is what JetStream
// needs for R3), waits until it has a JetStream meta leader and every node
// is current, and stops it when the test ends.
func StartNATSCluster(tb testing.TB, n int) *NATSCluster {
	tb.Helper()
	if n < 2 {
		tb.Fatalf("harness: a NATS cluster needs at least 2 nodes, not %d", n)
	}
	c := &NATSCluster{tb: tb}
	name := fmt.Sprintf("dbinformer-%d", FreePort(tb))
	clusterPorts := make([]int, n)
	for i := range n {
		clusterPorts[i] = FreePort(tb)
	}
	// Proxies in front of every node's cluster port, used only by routes
	// from or to the last node.
	proxies := make([]*DelayProxy, n)
	for i := range n {
		p, err := NewDelayProxy(fmt.Sprintf("127.0.0.1:%d", clusterPorts[i]))
		if err != nil {
			tb.Fatalf("harness: route proxy: %v", err)
		}
		proxies[i] = p
		tb.Cleanup(func() { _ = p.Close() })
	}
	c.lag = proxies
	last := n - 1
	for i := range n {
		node := newNATS(tb, fmt.Sprintf("n%d", i+1))
		node.opts.Cluster = natsserver.ClusterOpts{
			Name: name,
			Host: "127.0.0.1",
			Port: clusterPorts[i],
			// Gossip hands out this address: a node that learns of
			// another through gossip connects through its proxy, so
			// nothing bypasses the last node's proxies.
			Advertise: proxies[i].Addr(),
		}
		for j := range n {
			if j == i {
				continue
			}
			addr := fmt.Sprintf("127.0.0.1:%d", clusterPorts[j])
			if i == last || j == last {
				addr = proxies[j].Addr()
			}
			if i == last || j != last { // the others dial the last node through gossip
				node.opts.Routes = append(node.opts.Routes, &url.URL{Scheme: "nats", Host: addr})
			}
		}
		c.Nodes = append(c.Nodes, node)
	}
	tb.Cleanup(c.Stop)
	// The others first, routed directly to each other, so that no route
	// between them is learnt through the last node's gossip.
	for i := range last {
		c.Nodes[i].start(tb)
	}
	c.waitRoutes(tb, last, last-1)
	c.Nodes[last].start(tb)
	c.WaitReady(tb)
	return c
}

func (c *NATSCluster) waitRoutes(tb testing.TB, nodes, peers int) {
	deadline := time.Now().Add(natsReadyTimeout)
	for {
		ok := true
		for i := range nodes {
			if s := c.Nodes[i].Server(); s == nil || s.NumRoutes() < peers {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			Unavailable(tb, "NATS cluster nodes not routed to each other after %v (see their logs)", natsReadyTimeout)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitReady waits until every running node is routed to the others and
// the cluster has a JetStream meta leader that every node follows and that
// can place replicas on every running node.
func (c *NATSCluster) WaitReady(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(2 * natsReadyTimeout)
	for {
		running, leaders, current, online := 0, 0, 0, 0
		for _, n := range c.Nodes {
			s := n.Server()
			if s == nil {
				continue
			}
			running++
			if s.JetStreamIsLeader() {
				leaders++
				// The peers the meta leader can place on: online, with
				// their stats in (an R3 stream created before is refused
				// with "no suitable peers for placement, peer offline").
				online = len(s.JetStreamClusterPeers())
			}
			if s.JetStreamIsCurrent() {
				current++
			}
		}
		if leaders == 1 && current == running && online == running {
			return
		}
		if time.Now().After(deadline) {
			Unavailable(tb, "NATS cluster: %d meta leaders, %d of %d nodes current, %d online for placement after %v (see their logs)", leaders, current, running, online, 2*natsReadyTimeout)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL is node i's client URL.
func (c *NATSCluster) URL(i int) string { return c.Nodes[i].URL() }

// URLs is every node's client URL, comma-separated, for a client that may
// connect to any.
func (c *NATSCluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// Conn connects a client to node i only (it does not learn the others'
// addresses), reconnecting forever; it is closed when the test ends.
func (c *NATSCluster) Conn(tb testing.TB, i int) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(c.URL(i),
		nats.Name(tb.Name()),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.DontRandomize(),
		nats.IgnoreDiscoveredServers(),
	)
	if err != nil {
		tb.Fatalf("harness: connect to nats-server %d at %s: %v", i, c.URL(i), err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a new connection to node i.
func (c *NATSCluster) JetStream(tb testing.TB, i int) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(c.Conn(tb, i))
	if err != nil {
		tb.Fatalf("harness: jetstream context: %v", err)
	}
	return js
}

// StreamLeader returns the index of the node that leads stream (in the
// global account), or -1 while it has none.
func (c *NATSCluster) StreamLeader(stream string) int {
	for i, n := range c.Nodes {
		if s := n.Server(); s != nil && s.JetStreamIsStreamLeader(natsserver.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// WaitStreamLeader waits until stream has a leader and returns its index.
func (c *NATSCluster) WaitStreamLeader(tb testing.TB, stream string) int {
	tb.Helper()
	deadline := time.Now().Add(2 * natsReadyTimeout)
	for {
		if i := c.StreamLeader(stream); i >= 0 {
			return i
		}
		if time.Now().After(deadline) {
			tb.Fatalf("harness: stream %q has no leader after %v", stream, 2*natsReadyTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StepDown makes stream's current leader step down (a new one is elected
// among the replicas) and returns the old leader's index, or -1 if the
// stream had no leader.
func (c *NATSCluster) StepDown(stream string) int {
	i := c.StreamLeader(stream)
	if i < 0 {
		return -1
	}
	if s := c.Nodes[i].Server(); s != nil {
		_ = s.JetStreamStepdownStream(natsserver.DEFAULT_GLOBAL_ACCOUNT, stream)
	}
	return i
}

// LagLast holds every byte on the last node's routes for d (0: none).
func (c *NATSCluster) LagLast(d time.Duration) {
	for _, p := range c.lag {
		p.SetDelay(d)
	}
}

// Stop stops every node.
func (c *NATSCluster) Stop() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Go(n.Stop)
	}
	wg.Wait()
}

// DelayProxy forwards every TCP connection it accepts to one target and
// holds each chunk of bytes, both ways, for a delay that may change while
// it runs (a slow link, not a slow peer: throughput is kept, order too).
type DelayProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewDelayProxy listens on 127.0.0.1 on a port the system picks.
func NewDelayProxy(target string) (*DelayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address to connect to.
func (p *DelayProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets the delay of bytes read from now on.
func (p *DelayProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *DelayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *DelayProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Go(func() {
			u, err := net.DialTimeout("tcp", p.target, 5*time.Second)
			if err != nil || !p.track(u) {
				_ = c.Close()
				if u != nil {
					_ = u.Close()
				}
				return
			}
			var pair sync.WaitGroup
			pair.Go(func() { p.pipe(u, c) })
			pair.Go(func() { p.pipe(c, u) })
			pair.Wait()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, u)
			p.mu.Unlock()
		})
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst, each chunk no sooner than the delay after it was
// read; when either side ends, both connections close.
func (p *DelayProxy) pipe(dst, src net.Conn) {
	ch := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() { _ = dst.Close(); _ = src.Close() }()
		for c := range ch {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close() // ends the reader, which closes ch
				for range ch {
				}
				return
			}
		}
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	wg.Wait()
	_ = dst.Close()
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *DelayProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
