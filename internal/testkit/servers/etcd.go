package servers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/dbinformer/dbinformer/internal/testkit/proxy"
)

// EtcdProgressNotifyInterval is how often the embedded etcd sends progress
// notifications to watches that asked for them. etcd's default is ten
// minutes, which no test can wait for; one second keeps unsolicited
// bookmarks flowing without flooding the watch.
const EtcdProgressNotifyInterval = time.Second

// The gRPC keepalives of the clients the harness makes: a client pings a
// connection that has been quiet this long and gives it up when the ping
// is not answered in EtcdKeepAliveTimeout, so that a member that stops
// answering (frozen, or behind a half-open connection) is noticed in
// seconds. The server accepts pings this frequent (its
// --grpc-keepalive-min-time is lowered to match; etcd's default of 5s
// would answer more frequent pings with GOAWAY "too_many_pings").
const (
	EtcdKeepAliveTime    = time.Second
	EtcdKeepAliveTimeout = 3 * time.Second
)

// Etcd is a real single-member etcd server embedded in the test process,
// listening on 127.0.0.1 on ports picked at start, with its data in a temp
// dir. It is stopped when the test ends.
type Etcd struct {
	dir    string
	log    *LogBuffer
	zlog   *zap.Logger
	client url.URL
	peer   url.URL
	mu     sync.Mutex
	server *embed.Etcd // nil while stopped
	opts   EtcdOptions

	// Set for a member of an EtcdCluster; zero for a single server.
	name           string
	advertisePeer  url.URL // where the other members reach it
	initialCluster string
}

// EtcdOptions adjusts the embedded etcd. The zero value means defaults.
type EtcdOptions struct {
	// ProgressNotifyInterval overrides EtcdProgressNotifyInterval, e.g. to
	// make sure that a test's bookmark came from a progress request and
	// not from the periodic notification.
	ProgressNotifyInterval time.Duration
}

// StartEtcd starts an embedded etcd and stops it at the end of the test.
// Embedded etcd needs nothing from the machine, so a failure to start is a
// test failure (never a skip).
func StartEtcd(tb testing.TB) *Etcd {
	tb.Helper()
	return StartEtcdWith(tb, EtcdOptions{})
}

// StartEtcdWith is StartEtcd with options.
func StartEtcdWith(tb testing.TB, opts EtcdOptions) *Etcd {
	tb.Helper()
	e, err := startEtcd(tb.TempDir(), NewLogBuffer(tb, "etcd"), opts)
	if err != nil {
		tb.Fatalf("harness: start embedded etcd: %v", err)
	}
	tb.Cleanup(e.Close)
	return e
}

// StartEtcdMain starts an embedded etcd outside of any test, for a
// TestMain that serves runnable examples (which get no testing.TB). The
// caller calls Close and removes dir. The log is kept in memory and
// returned by Log.
func StartEtcdMain(dir string) (*Etcd, error) {
	return startEtcd(dir, &LogBuffer{name: "etcd"}, EtcdOptions{})
}

func startEtcd(dir string, log *LogBuffer, opts EtcdOptions) (*Etcd, error) {
	e := &Etcd{dir: dir, log: log, opts: opts}
	// A member that logs at Fatal level (say its data directory was removed
	// while it still wrote) would call os.Exit(1) and end the whole test
	// binary with nothing printed, its log being in a LogBuffer shown only
	// for failed tests. The hook ends the goroutine that logged instead: the
	// entry stays in the log, and a test that still needed that server fails
	// on its own assertions, log printed.
	e.zlog = zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.AddSync(e.log),
		zapcore.InfoLevel,
	), zap.WithFatalHook(zapcore.WriteThenGoexit))
	// A port picked at random can be taken by someone else before etcd
	// binds it; pick new ones and try again a few times.
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		var cp, pp int
		if cp, err = freePort(); err != nil {
			break
		}
		if pp, err = freePort(); err != nil {
			break
		}
		e.client = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cp)}
		e.peer = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pp)}
		if err = e.start(); err == nil {
			return e, nil
		}
		if !isAddrInUse(err) {
			break
		}
	}
	return nil, err
}

// Log returns what the server logged so far.
func (e *Etcd) Log() string { return e.log.String() }

func isAddrInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}

func (e *Etcd) config() *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = "dbinformer-test"
	cfg.Dir = e.dir
	cfg.ListenClientUrls = []url.URL{e.client}
	cfg.AdvertiseClientUrls = []url.URL{e.client}
	cfg.ListenPeerUrls = []url.URL{e.peer}
	cfg.AdvertisePeerUrls = []url.URL{e.peer}
	cfg.InitialCluster = cfg.Name + "=" + e.peer.String()
	if e.name != "" {
		cfg.Name = e.name
		cfg.AdvertisePeerUrls = []url.URL{e.advertisePeer}
		cfg.InitialCluster = e.initialCluster
	}
	cfg.InitialClusterToken = "dbinformer-test"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(e.zlog)
	cfg.Logger = "zap"
	// The gateway, auto compaction (retention 0 turns it off) and fsync
	// only cost time here: tests compact explicitly, and a crashed test
	// process does not need its data.
	cfg.EnableGRPCGateway = false
	cfg.AutoCompactionRetention = "0"
	cfg.UnsafeNoFsync = true
	// NewConfig leaves this at zero, which logs every request as slow and
	// buries a failed test's log in noise.
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	cfg.WatchProgressNotifyInterval = EtcdProgressNotifyInterval
	// bcrypt's minimum cost (4): tests that turn auth on would otherwise
	// spend seconds per login under the race detector.
	cfg.BcryptCost = 4
	cfg.GRPCKeepAliveMinTime = EtcdKeepAliveTime / 2
	if e.opts.ProgressNotifyInterval > 0 {
		cfg.WatchProgressNotifyInterval = e.opts.ProgressNotifyInterval
	}
	return cfg
}

func (e *Etcd) start() error {
	srv, err := embed.StartEtcd(e.config())
	if err != nil {
		return err
	}
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		srv.Close()
		return fmt.Errorf("etcd stopped before it was ready: %w", err)
	case <-deadline.C:
		srv.Close()
		return errors.New("etcd was not ready within 60s")
	}
	e.mu.Lock()
	e.server = srv
	e.mu.Unlock()
	return nil
}

// Endpoints returns the client URLs, for clientv3.Config.Endpoints. They
// stay the same across Stop and Restart.
func (e *Etcd) Endpoints() []string { return []string{e.client.String()} }

// DataDir returns the server's data directory.
func (e *Etcd) DataDir() string { return e.dir }

// Client returns a new client connected to the server, closed when the test
// ends. Its log goes to the server's log buffer.
func (e *Etcd) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	c := e.newClient(tb)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// ClientConfig returns the configuration Client uses: the server's
// endpoints, a dial timeout, gRPC keepalives (EtcdKeepAliveTime,
// EtcdKeepAliveTimeout) and a logger writing to the server's log buffer.
// Change Endpoints to reach the server through a proxy.
func (e *Etcd) ClientConfig() clientv3.Config {
	return clientv3.Config{
		Endpoints:            e.Endpoints(),
		DialTimeout:          10 * time.Second,
		DialKeepAliveTime:    EtcdKeepAliveTime,
		DialKeepAliveTimeout: EtcdKeepAliveTimeout,
		Logger:               e.zlog.Named("client"),
	}
}

// ProxiedClient returns a new client whose traffic passes a proxy the
// test can cut or freeze (the TCP connection open, nothing passing); both
// are closed when the test ends.
func (e *Etcd) ProxiedClient(tb testing.TB) (*clientv3.Client, *proxy.Proxy) {
	tb.Helper()
	px, err := proxy.New(strings.TrimPrefix(e.Endpoints()[0], "http://"))
	if err != nil {
		tb.Fatalf("harness: etcd proxy: %v", err)
	}
	tb.Cleanup(func() { _ = px.Close() })
	cfg := e.ClientConfig()
	cfg.Endpoints = []string{"http://" + px.Addr()}
	c, err := clientv3.New(cfg)
	if err != nil {
		tb.Fatalf("harness: etcd client: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c, px
}

func (e *Etcd) newClient(tb testing.TB) *clientv3.Client {
	tb.Helper()
	c, err := clientv3.New(e.ClientConfig())
	if err != nil {
		tb.Fatalf("harness: etcd client: %v", err)
	}
	return c
}

// Stop stops the server, keeping its data dir and ports, so that Restart
// can bring the same member back. Clients stay open and reconnect after
// Restart. Stop on a stopped server does nothing.
func (e *Etcd) Stop() {
	e.mu.Lock()
	srv := e.server
	e.server = nil
	e.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Running reports whether the server runs (it was not stopped, or was
// restarted since).
func (e *Etcd) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.server != nil
}

// Restart starts the stopped server again on the same data dir and ports.
func (e *Etcd) Restart(tb testing.TB) {
	tb.Helper()
	e.Stop()
	// The ports were ours a moment ago, but a closed listener's port can be
	// briefly unavailable, or taken by another test: retry for a while.
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = e.start(); err == nil || !isAddrInUse(err) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("harness: restart embedded etcd: %v", err)
	}
}

// Compact compacts the server's history up to rev (physically, so that the
// compaction has happened when Compact returns). Watches from at or below
// rev then fail with ErrCompacted.
func (e *Etcd) Compact(tb testing.TB, rev int64) {
	tb.Helper()
	c := e.newClient(tb)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		tb.Fatalf("harness: compact etcd at revision %d: %v", rev, err)
	}
}

// Head returns the server's current revision.
func (e *Etcd) Head(tb testing.TB) int64 {
	tb.Helper()
	c := e.newClient(tb)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		tb.Fatalf("harness: read etcd revision: %v", err)
	}
	return resp.Header.Revision
}

// Close stops the server for good; StartEtcd calls it at cleanup.
func (e *Etcd) Close() {
	e.Stop()
	_ = e.zlog.Sync()
}
