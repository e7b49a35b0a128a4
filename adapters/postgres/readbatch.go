package pginformer

import (
	"crypto/tls"
	"net"
	"syscall"
	"time"
)

// Batched reads of a busy replication stream.
//
// A consumer that keeps up with the walsender finds a message or two in
// the socket at each read (about 330 bytes on average, measured) and then
// waits in epoll for the next, so nearly every message the walsender
// sends must wake it. Those wake-ups cost the server: in bench's
// Streaming/backlog (a 400k-row backlog drained on a 2-vCPU VM) the
// walsender spent 1.8–2.6 s and the drain ran at 126–221k rows/s (median
// 176k). With reads batched as below: walsender 1.5–2.0 s, drain 195–258k
// rows/s (median 226k), and this process's CPU for the drain 1.0–1.4 s
// instead of 1.7–2.5 s.
//
// So while the stream is busy the socket's receive low-water mark
// (SO_RCVLOWAT) is raised to what arrives in about batchDelay, and the
// kernel wakes the reader once that much is queued. A quiet stream keeps
// the default (wake on every byte), so a lone change is delivered at once;
// and while batching, a receive waits at most batchWait before it takes
// whatever is queued, which bounds the delay a burst's tail can see.
const (
	batchDelay  = 5 * time.Millisecond
	batchWait   = 5 * time.Millisecond
	batchWindow = 20 * time.Millisecond // the arrival rate is measured over at least this
	minLowat    = 16 << 10              // below this, batching saves too little to be worth a wait
	// maxLowat is half the default initial receive buffer (tcp_rmem's
	// 128 KiB): kernels that grow the buffer to twice a larger low-water
	// mark also clamp the TCP window to it, which would cap a distant
	// server's throughput.
	maxLowat = 64 << 10
)

// readBatcher owns the replication socket's receive low-water mark.
type readBatcher struct {
	raw   syscall.RawConn // nil: not a TCP socket (or no access to it): never batches
	lowat int             // as set on the socket; 1 is the kernel's default
	bytes int             // received since since
	since time.Time
}

func newReadBatcher(conn net.Conn, now time.Time) *readBatcher {
	b := &readBatcher{lowat: 1, since: now}
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		if raw, err := tcp.SyscallConn(); err == nil {
			b.raw = raw
		}
	}
	return b
}

// received counts n bytes of stream.
func (b *readBatcher) received(n int) { b.bytes += n }

// adjust sets the low-water mark from the rate since the last
// adjustment. It reports whether the receive bound (receiveWait) changed.
func (b *readBatcher) adjust(now time.Time) bool {
	if b.raw == nil {
		return false
	}
	elapsed := now.Sub(b.since)
	if elapsed < batchWindow {
		return false
	}
	want := 1
	if target := int(float64(b.bytes) * float64(batchDelay) / float64(elapsed)); target >= minLowat {
		// A power of two: a rate that wobbles does not reset the
		// socket at every window.
		want = minLowat
		for want*2 <= min(target, maxLowat) {
			want *= 2
		}
	}
	b.bytes, b.since = 0, now
	if want == b.lowat {
		return false
	}
	wasBatching := b.lowat > 1
	var serr error
	if err := b.raw.Control(func(fd uintptr) { serr = setLowat(fd, want) }); err != nil {
		serr = err
	}
	if serr != nil {
		// A platform or kernel without SO_RCVLOWAT for TCP: stay eager.
		// The stream is no less correct, only costlier for the server.
		b.raw = nil
		return wasBatching
	}
	b.lowat = want
	return wasBatching != (want > 1)
}

// receiveWait bounds a receive: short while batching, so a burst's tail
// below the low-water mark waits at most batchWait; otherwise long.
func (b *readBatcher) receiveWait(long time.Duration) time.Duration {
	if b.lowat > 1 {
		return batchWait
	}
	return long
}
