package servers

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/dbinformer/dbinformer/internal/testkit/proxy"
)

// EtcdCluster is a real etcd cluster of several members embedded in the
// test process, on loopback. Each member's peer traffic comes in through a
// proxy of its own, and each member has a second proxy in front of its
// client port, so that a test can cut a member off from its peers
// (Isolate) or make it silent to clients (Freeze) while the rest of the
// cluster goes on. It is stopped when the test ends.
type EtcdCluster struct {
	members  []*Etcd
	peerPx   []*proxy.Proxy // member i's inbound peer traffic
	clientPx []*proxy.Proxy // in front of member i's client port
}

// StartEtcdCluster starts an n-member cluster and waits until every member
// is ready (which needs a leader).
func StartEtcdCluster(tb testing.TB, n int) *EtcdCluster {
	tb.Helper()
	c := &EtcdCluster{}
	tb.Cleanup(c.close)
	var peers []string
	for i := range n {
		cp, err := freePort()
		if err != nil {
			tb.Fatalf("harness: %v", err)
		}
		pp, err := freePort()
		if err != nil {
			tb.Fatalf("harness: %v", err)
		}
		e := &Etcd{
			dir:    tb.TempDir(),
			log:    NewLogBuffer(tb, fmt.Sprintf("etcd member %d", i)),
			client: url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cp)},
			peer:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pp)},
			name:   fmt.Sprintf("member-%d", i),
		}
		e.zlog = zap.New(zapcore.NewCore(
			zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
			zapcore.AddSync(e.log),
			zapcore.InfoLevel,
		), zap.WithFatalHook(zapcore.WriteThenGoexit)) // as in startEtcd
		ppx, err := proxy.New(e.peer.Host)
		if err != nil {
			tb.Fatalf("harness: peer proxy: %v", err)
		}
		c.peerPx = append(c.peerPx, ppx)
		cpx, err := proxy.New(e.client.Host)
		if err != nil {
			tb.Fatalf("harness: client proxy: %v", err)
		}
		c.clientPx = append(c.clientPx, cpx)
		e.advertisePeer = url.URL{Scheme: "http", Host: ppx.Addr()}
		peers = append(peers, e.name+"="+e.advertisePeer.String())
		c.members = append(c.members, e)
	}
	initial := strings.Join(peers, ",")
	// A member is ready only once a quorum is up: start them together.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, e := range c.members {
		e.initialCluster = initial
		wg.Go(func() { errs[i] = e.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("harness: start a %d-member etcd cluster: %v", n, err)
	}
	return c
}

// Member returns member i, to Stop and Restart it, or Compact and read its
// Head.
func (c *EtcdCluster) Member(i int) *Etcd { return c.members[i] }

// Endpoints returns every member's client URL, reached directly.
func (c *EtcdCluster) Endpoints() []string {
	var out []string
	for _, e := range c.members {
		out = append(out, e.Endpoints()...)
	}
	return out
}

// ProxiedEndpoints returns every member's client URL through its client
// proxy, which Freeze silences.
func (c *EtcdCluster) ProxiedEndpoints() []string {
	var out []string
	for _, px := range c.clientPx {
		out = append(out, "http://"+px.Addr())
	}
	return out
}

// ClientConfig is Etcd.ClientConfig for the whole cluster: every member's
// endpoint, reached directly.
func (c *EtcdCluster) ClientConfig() clientv3.Config {
	cfg := c.members[0].ClientConfig()
	cfg.Endpoints = c.Endpoints()
	return cfg
}

// Client returns a client of every member, reached directly, closed when
// the test ends.
func (c *EtcdCluster) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(c.ClientConfig())
	if err != nil {
		tb.Fatalf("harness: etcd cluster client: %v", err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Isolate cuts member i off from its peers: every connection into its peer
// port is cut and new ones are refused, so that it hears neither the
// leader nor the votes of the others and ends up without a leader (a
// leader steps down). Its clients still reach it.
func (c *EtcdCluster) Isolate(i int) {
	c.peerPx[i].Pause()
	c.peerPx[i].Cut()
}

// Freeze makes member i silent to the clients that reach it through
// ProxiedEndpoints: their connections stay open, but no byte passes, as
// with a member stopped by SIGSTOP or behind a half-open connection. Its
// peers still reach it.
func (c *EtcdCluster) Freeze(i int) { c.clientPx[i].Freeze() }

// Heal ends Isolate and Freeze of member i.
func (c *EtcdCluster) Heal(i int) {
	c.peerPx[i].Resume()
	c.clientPx[i].Resume()
}

func (c *EtcdCluster) close() {
	// Stopped together: a member stopping alone waits for its peers.
	var wg sync.WaitGroup
	for _, e := range c.members {
		wg.Go(e.Close)
	}
	wg.Wait()
	for _, px := range append(c.peerPx, c.clientPx...) {
		_ = px.Close()
	}
}
