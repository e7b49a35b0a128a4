package servers

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsReadyTimeout bounds how long a start waits for the embedded server to
// accept clients; a loaded CI machine may need several seconds to recover a
// file store.
const natsReadyTimeout = 30 * time.Second

// NATS is a real nats-server with JetStream, embedded in the test process,
// listening on 127.0.0.1 on a port that stays the same across Restart, its
// file store in a temp dir that survives Restart.
type NATS struct {
	tb   testing.TB
	opts natsserver.Options
	log  *LogBuffer

	mu  sync.Mutex
	srv *natsserver.Server // nil while stopped
}

// StartNATS starts the server and stops it when the test ends.
func StartNATS(tb testing.TB) *NATS {
	tb.Helper()
	n := newNATS(tb, "dbinformer-test")
	tb.Cleanup(n.Stop)
	n.start(tb)
	return n
}

// newNATS configures (but does not start) a JetStream server on loopback.
func newNATS(tb testing.TB, name string) *NATS {
	return &NATS{
		tb:  tb,
		log: NewLogBuffer(tb, "nats-server "+name),
		opts: natsserver.Options{
			ServerName: name,
			Host:       "127.0.0.1",
			Port:       FreePort(tb),
			JetStream:  true,
			StoreDir:   filepath.Join(tb.TempDir(), "jetstream"),
			// The server belongs to the test, not to the process: no
			// signal handlers, no HTTP monitor.
			NoSigs:     true,
			MaxPayload: 1 << 20,
		},
	}
}

func (n *NATS) start(tb testing.TB) {
	tb.Helper()
	opts := n.opts // NewServer keeps and mutates its *Options
	srv, err := natsserver.NewServer(&opts)
	if err != nil {
		Unavailable(tb, "embedded nats-server: %v", err)
		return
	}
	srv.SetLoggerV2(natsLogger{n.log}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(natsReadyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		Unavailable(tb, "embedded nats-server %s on 127.0.0.1:%d not ready after %v (port taken? see its log)", n.opts.ServerName, n.opts.Port, natsReadyTimeout)
		return
	}
	n.mu.Lock()
	n.srv = srv
	n.mu.Unlock()
}

// URL is the client URL, nats://127.0.0.1:port. It stays valid across
// Restart.
func (n *NATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.opts.Port) }

// Server returns the running server, or nil while stopped.
func (n *NATS) Server() *natsserver.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Conn connects a client that reconnects forever, quickly, so that tests
// which Stop and Restart the server see the same connection come back. It is
// closed when the test ends (before the server stops).
func (n *NATS) Conn(tb testing.TB) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(n.URL(),
		nats.Name(tb.Name()),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.RetryOnFailedConnect(false),
	)
	if err != nil {
		tb.Fatalf("harness: connect to nats-server at %s: %v", n.URL(), err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a new connection from Conn.
func (n *NATS) JetStream(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(n.Conn(tb))
	if err != nil {
		tb.Fatalf("harness: jetstream context: %v", err)
	}
	return js
}

// Stop shuts the server down and waits until it has flushed its store and
// released its port. Stopping a stopped server does nothing.
func (n *NATS) Stop() {
	n.mu.Lock()
	srv := n.srv
	n.srv = nil
	n.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Shutdown()
	srv.WaitForShutdown()
}

// Restart stops the server if it runs and starts it again on the same port
// with the same store dir, so that streams, buckets and their data survive.
func (n *NATS) Restart(tb testing.TB) {
	tb.Helper()
	n.Stop()
	n.start(tb)
}

// natsLogger sends the server's log lines to the test's LogBuffer.
type natsLogger struct{ w *LogBuffer }

func (l natsLogger) logf(level, format string, v ...any) {
	fmt.Fprintf(l.w, "%s [%s] %s\n", time.Now().UTC().Format("15:04:05.000000"), level, fmt.Sprintf(format, v...))
}

func (l natsLogger) Noticef(format string, v ...any) { l.logf("INF", format, v...) }
func (l natsLogger) Warnf(format string, v ...any)   { l.logf("WRN", format, v...) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.logf("FTL", format, v...) }
func (l natsLogger) Errorf(format string, v ...any)  { l.logf("ERR", format, v...) }
func (l natsLogger) Debugf(format string, v ...any)  { l.logf("DBG", format, v...) }
func (l natsLogger) Tracef(format string, v ...any)  { l.logf("TRC", format, v...) }
