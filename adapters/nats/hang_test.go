package natsinformer_test

import (
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// holdProxy forwards TCP connections to a server and, while held, stops
// passing the client's bytes on: the connection stays up and the server
// never sees the requests, as when a request is lost with a connection
// that has died without either end noticing yet.
type holdProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	held   chan struct{} // closed when released; nil when not held
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *holdProxy) addr() string { return p.ln.Addr().String() }

func (p *holdProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.pipe(s, c, true) }()
		go func() { defer p.wg.Done(); p.pipe(c, s, false) }()
	}
}

func (p *holdProxy) pipe(dst, src net.Conn, holdable bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if holdable {
			p.mu.Lock()
			held := p.held
			p.mu.Unlock()
			if held != nil {
				<-held
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *holdProxy) hold() {
	p.mu.Lock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
	p.mu.Unlock()
}

func (p *holdProxy) release() {
	p.mu.Lock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.mu.Unlock()
}

func (p *holdProxy) close() {
	_ = p.ln.Close()
	p.release()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// A request lost on a connection that looks alive gets no answer, and the
// informer's contexts may have no deadline or a far one. Watch and List
// bound their own requests and fail, so that the informer retries, instead
// of waiting for the caller's deadline (found by the reliability suite:
// a watch opened across a server restart waited for the test's deadline).
func TestKVRequestsLostOnLiveConnection(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rev := mustPut(t, ctx, kv, "a", 1)
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	px := newHoldProxy(t, u.Host)
	nc, err := nats.Connect("nats://"+px.addr(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ijs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	lw, err := natsinformer.NewKV(ctx, ijs, kv.Bucket(), natsinformer.KVOptions[item]{})
	if err != nil {
		t.Fatal(err)
	}
	px.hold()
	defer px.release()

	done := make(chan error, 2)
	go func() {
		done <- lw.Watch(ctx, core.ResourceVersion(rev), driver.WatchOptions[item]{Emit: func([]driver.Event[item]) error { return nil }})
	}()
	go func() {
		_, err := lw.List(ctx, driver.ListSink[item]{Emit: func(driver.Event[item]) error { return nil }})
		done <- err
	}()
	for range 2 {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a request that got no answer succeeded")
			}
			if ctx.Err() != nil {
				t.Fatalf("returned only at the caller's deadline: %v", err)
			}
			t.Logf("failed as it should: %v", err)
		case <-time.After(2 * time.Minute):
			t.Fatal("Watch or List still waits for an answer that will not come")
		}
	}
}
