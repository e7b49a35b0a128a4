//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package pginformer

import (
	"crypto/tls"
	"net"
	"syscall"
	"testing"
	"time"
)

// tcpPair is a connected loopback TCP pair; the client end is returned.
func tcpPair(t *testing.T) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	t.Cleanup(func() {
		c.Close()
		if srv != nil {
			srv.Close()
		}
	})
	return c
}

func socketLowat(t *testing.T, c net.Conn) int {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		v, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return v
}

func TestReadBatcherFollowsTheArrivalRate(t *testing.T) {
	c := tcpPair(t)
	t0 := time.Unix(1000, 0)
	b := newReadBatcher(c, t0)
	if b.raw == nil {
		t.Fatal("a TCP connection must be batchable")
	}
	const long = 100 * time.Millisecond
	if got := b.receiveWait(long); got != long {
		t.Fatalf("a new stream's receive bound is %v, want %v (no batching before a rate is known)", got, long)
	}

	// A window shorter than batchWindow says nothing yet.
	b.received(1 << 20)
	if b.adjust(t0.Add(batchWindow / 2)) {
		t.Fatal("adjusted on a window shorter than batchWindow")
	}
	// 1 MiB in 20 ms: far above maxLowat per batchDelay.
	if !b.adjust(t0.Add(batchWindow)) {
		t.Fatal("a busy stream must switch to batched reads")
	}
	if got := socketLowat(t, c); got != maxLowat {
		t.Fatalf("SO_RCVLOWAT = %d, want %d", got, maxLowat)
	}
	if got := b.receiveWait(long); got != batchWait {
		t.Fatalf("while batching the receive bound is %v, want %v", got, batchWait)
	}

	// A rate whose batchDelay's worth is between 32 and 64 KiB: 32 KiB
	// (a power of two, rounded down). Still batching: the bound is
	// unchanged.
	at := t0.Add(batchWindow)
	window := 40 * time.Millisecond
	b.received(int(float64(48<<10) * float64(window) / float64(batchDelay)))
	at = at.Add(window)
	if b.adjust(at) {
		t.Fatal("a change of low-water mark while batching must not change the receive bound")
	}
	if got := socketLowat(t, c); got != 32<<10 {
		t.Fatalf("SO_RCVLOWAT = %d, want %d", got, 32<<10)
	}

	// A trickle: back to waking on every byte, and the long bound.
	b.received(100)
	at = at.Add(window)
	if !b.adjust(at) {
		t.Fatal("a quiet stream must leave batched reads")
	}
	if got := socketLowat(t, c); got != 1 {
		t.Fatalf("SO_RCVLOWAT = %d, want 1", got)
	}
	if got := b.receiveWait(long); got != long {
		t.Fatalf("after batching the receive bound is %v, want %v", got, long)
	}
	// Nothing changes on a quiet stream that stays quiet.
	if b.adjust(at.Add(window)) {
		t.Fatal("a quiet stream adjusted again")
	}
}

func TestReadBatcherLooksThroughTLS(t *testing.T) {
	c := tcpPair(t)
	b := newReadBatcher(tls.Client(c, &tls.Config{InsecureSkipVerify: true}), time.Unix(0, 0))
	if b.raw == nil {
		t.Fatal("the TCP socket under a TLS connection must be batchable")
	}
}

func TestReadBatcherLeavesOtherConnsAlone(t *testing.T) {
	a, z := net.Pipe()
	defer a.Close()
	defer z.Close()
	t0 := time.Unix(0, 0)
	b := newReadBatcher(a, t0)
	b.received(1 << 30)
	if b.adjust(t0.Add(time.Second)) || b.receiveWait(time.Second) != time.Second {
		t.Fatal("a connection that is not TCP must never batch")
	}
}
