package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/internal/testkit/proxy"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan net.Conn, 100)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			go func() { _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String(), func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	}
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(c, msg); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestCutPauseResume(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	target, stop := echoServer(t)
	defer stop()
	p, err := proxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "hello"); err != nil || got != "hello\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	if n := p.Cut(); n != 1 {
		t.Fatalf("Cut closed %d connections, want 1", n)
	}
	if _, err := roundTrip(c, r, "again"); err == nil {
		t.Fatal("a cut connection still works")
	}

	p.Pause()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c2, bufio.NewReader(c2), "paused"); err == nil {
		t.Fatal("a connection made while paused works")
	}
	c2.Close()

	p.Resume()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3), "resumed"); err != nil || got != "resumed\n" {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
	if p.Live() != 1 || p.Cuts() != 1 {
		t.Fatalf("Live %d Cuts %d, want 1 and 1", p.Live(), p.Cuts())
	}
}

// A target that is down ends the client's connection instead of hanging it.
func TestTargetDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	p, err := proxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, bufio.NewReader(c), "x"); err == nil {
		t.Fatal("a connection to a down target works")
	}
}

// Close with live connections ends them and every goroutine.
func TestCloseWithLiveConnections(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	target, stop := echoServer(t)
	defer stop()
	p, err := proxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	var cs []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := roundTrip(c, bufio.NewReader(c), "x"); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if _, err := roundTrip(c, bufio.NewReader(c), "y"); err == nil {
			t.Fatal("a connection outlived Close")
		}
	}
}

// Freeze holds bytes in both directions without closing anything; Thaw
// delivers them, in order.
func TestFreezeHoldsBytes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	target, stop := echoServer(t)
	defer stop()
	p, err := proxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "before"); err != nil || got != "before\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	p.Freeze()
	if _, err := fmt.Fprintln(c, "held"); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, p, len("held\n"))
	// The proxy holds the request, so the server cannot have answered:
	// nothing can be readable, which a read with a deadline already
	// passed shows without waiting.
	_ = c.SetReadDeadline(time.Now())
	if b, err := r.ReadByte(); err == nil {
		t.Fatalf("read %q through a frozen proxy", b)
	}
	if p.Live() != 1 {
		t.Fatalf("Live = %d while frozen, want 1: a freeze closes nothing", p.Live())
	}
	// A connection made while frozen is accepted and held too.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := fmt.Fprintln(c2, "second"); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, p, len("held\nsecond\n"))

	p.Thaw()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after Thaw: %q, %v", got, err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := bufio.NewReader(c2).ReadString('\n'); err != nil || got != "second\n" {
		t.Fatalf("second connection after Thaw: %q, %v", got, err)
	}

	// Resume thaws as well, and Cut ends a connection held by a freeze.
	p.Freeze()
	if _, err := fmt.Fprintln(c, "cut"); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, p, len("cut\n"))
	if n := p.Cut(); n != 2 {
		t.Fatalf("Cut closed %d connections, want 2", n)
	}
	p.Resume()
	informertest.Eventually(t, "the cut connections to let go of what they held", func() bool { return p.Held() == 0 })
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3), "resumed"); err != nil || got != "resumed\n" {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
}

// waitHeld waits until the proxy holds at least n bytes.
func waitHeld(t *testing.T, p *proxy.Proxy, n int) {
	t.Helper()
	informertest.Eventually(t, fmt.Sprintf("the proxy to hold %d bytes", n), func() bool { return p.Held() >= n })
}
