package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy forwards every TCP connection it accepts to one target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[*pair]struct{}
	paused bool
	closed bool
	cuts   int

	wg sync.WaitGroup // the accept loop and every pair's copiers
}

// pair is one client connection and its upstream connection.
type pair struct {
	client net.Conn

	mu     sync.Mutex
	server net.Conn // nil while dialling
	closed bool
}

// setServer records the upstream connection; it reports false (and closes
// s) when the pair was closed meanwhile, e.g. by a Cut during the dial.
func (pr *pair) setServer(s net.Conn) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.closed {
		_ = s.Close()
		return false
	}
	pr.server = s
	return true
}

func (pr *pair) close() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.closed {
		return
	}
	pr.closed = true
	_ = pr.client.Close()
	if pr.server != nil {
		_ = pr.server.Close()
	}
}

// New listens on 127.0.0.1 on a port the system picks and forwards to
// target (host:port). Close stops it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the port of Addr.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		if p.paused || p.closed {
			p.mu.Unlock()
			// Refused as the client sees it: the connection ends at once.
			_ = c.Close()
			continue
		}
		pr := &pair{client: c}
		p.conns[pr] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pr)
	}
}

func (p *Proxy) serve(pr *pair) {
	defer p.wg.Done()
	defer func() {
		pr.close()
		p.mu.Lock()
		delete(p.conns, pr)
		p.mu.Unlock()
	}()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return // target down: the client sees its connection end
	}
	if !pr.setServer(s) {
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// One direction ending ends the pair: a half-open connection
		// would hide the fault from the client.
		pr.close()
		done <- struct{}{}
	}
	go cp(s, pr.client)
	go cp(pr.client, s)
	<-done
	<-done
}

// Cut closes every live connection, both ends, and returns how many there
// were. New connections are accepted unless the proxy is paused.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	live := make([]*pair, 0, len(p.conns))
	for pr := range p.conns {
		live = append(live, pr)
		delete(p.conns, pr)
	}
	p.cuts += len(live)
	p.mu.Unlock()
	for _, pr := range live {
		pr.close()
	}
	return len(live)
}

// Pause makes new connections end as soon as they are accepted; live ones
// are kept (Cut them too for a full outage).
func (p *Proxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Resume accepts new connections again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
}

// Live returns the number of connections being forwarded.
func (p *Proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Cuts returns how many connections Cut has closed so far.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Close stops listening, closes every connection and waits for all of the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}
