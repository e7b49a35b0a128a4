package proxy

import (
	"errors"
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
	thaw   chan struct{} // non-nil while frozen; closed by Thaw
	held   int           // bytes read from one side and not yet written to the other

	wg sync.WaitGroup // the accept loop and every pair's copiers
}

// pair is one client connection and its upstream connection.
type pair struct {
	client net.Conn
	done   chan struct{} // closed by close

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
	close(pr.done)
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
		pr := &pair{client: c, done: make(chan struct{})}
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
		p.copy(pr, dst, src)
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

// copy forwards src to dst until either fails or the pair closes; while
// the proxy is frozen it holds what it read instead of writing it.
func (p *Proxy) copy(pr *pair, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitThawed(pr, n) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitThawed returns once the proxy is not frozen (true) or the pair closed
// (false), counting n bytes as held meanwhile.
func (p *Proxy) waitThawed(pr *pair, n int) bool {
	p.mu.Lock()
	thaw := p.thaw
	if thaw == nil {
		p.mu.Unlock()
		return true
	}
	p.held += n
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.held -= n
		p.mu.Unlock()
	}()
	select {
	case <-thaw:
		return true
	case <-pr.done:
		return false
	}
}

// Freeze makes the path silent without closing anything, as a server that
// hangs or a network that drops packets would: connections stay open (and
// new ones are accepted), but every byte read from either side is held
// until Thaw or Resume. The peers' reads block, and their writes block once
// the kernel's buffers are full. Cut and Close still end held connections.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw == nil {
		p.thaw = make(chan struct{})
	}
}

// Thaw forwards what Freeze held, in order, and everything after it.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
}

// Held returns how many bytes a Freeze is holding, so that a test can wait
// until a request is stuck in the proxy.
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
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

// Resume ends every fault: it accepts new connections again (Pause) and
// forwards what a Freeze held (Thaw).
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
	p.Thaw()
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
