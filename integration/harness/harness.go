package harness

import (
	"testing"

	"github.com/dbinformer/dbinformer/internal/testkit/servers"
)

// The servers and their handles; see internal/testkit/servers.
type (
	Etcd        = servers.Etcd
	EtcdOptions = servers.EtcdOptions
	EtcdCluster = servers.EtcdCluster
	Kube        = servers.Kube
	NATS        = servers.NATS
	NATSCluster = servers.NATSCluster
	DelayProxy  = servers.DelayProxy
	Postgres    = servers.Postgres
	LogBuffer   = servers.LogBuffer
)

// EtcdProgressNotifyInterval is how often the embedded etcd sends progress
// notifications to watches that asked for them.
const EtcdProgressNotifyInterval = servers.EtcdProgressNotifyInterval

// The gRPC keepalives of the clients the harness makes (see
// internal/testkit/servers).
const (
	EtcdKeepAliveTime    = servers.EtcdKeepAliveTime
	EtcdKeepAliveTimeout = servers.EtcdKeepAliveTimeout
)

// KubeAPIServerEnv names the environment variable that points at a
// kube-apiserver binary.
const KubeAPIServerEnv = servers.KubeAPIServerEnv

// InCI reports whether CI=true: then a server that cannot start fails the
// test instead of skipping it.
func InCI() bool { return servers.InCI() }

// Unavailable fails the test under CI and skips it elsewhere, saying why.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	servers.Unavailable(tb, format, args...)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	return servers.FreePort(tb)
}

// NewLogBuffer returns a buffer that dumps itself at cleanup if tb failed.
func NewLogBuffer(tb testing.TB, name string) *LogBuffer {
	tb.Helper()
	return servers.NewLogBuffer(tb, name)
}

// StartEtcd starts an embedded etcd for the test.
func StartEtcd(tb testing.TB) *Etcd {
	tb.Helper()
	return servers.StartEtcd(tb)
}

// StartEtcdWith starts an embedded etcd for the test with opts.
func StartEtcdWith(tb testing.TB, opts EtcdOptions) *Etcd {
	tb.Helper()
	return servers.StartEtcdWith(tb, opts)
}

// StartEtcdMain starts an embedded etcd outside a test (a TestMain or an
// example program) with its data in dir.
func StartEtcdMain(dir string) (*Etcd, error) { return servers.StartEtcdMain(dir) }

// StartEtcdCluster starts an n-member embedded etcd cluster for the test.
func StartEtcdCluster(tb testing.TB, n int) *EtcdCluster {
	tb.Helper()
	return servers.StartEtcdCluster(tb, n)
}

// StartKube starts a real kube-apiserver for the test.
func StartKube(tb testing.TB) *Kube {
	tb.Helper()
	return servers.StartKube(tb)
}

// KubeAPIServerBinary returns the path of the kube-apiserver binary,
// building it if needed.
func KubeAPIServerBinary() (string, error) { return servers.KubeAPIServerBinary() }

// StartNATS starts an embedded nats-server with JetStream for the test.
func StartNATS(tb testing.TB) *NATS {
	tb.Helper()
	return servers.StartNATS(tb)
}

// StartNATSCluster starts an n-node embedded NATS cluster for the test.
func StartNATSCluster(tb testing.TB, n int) *NATSCluster {
	tb.Helper()
	return servers.StartNATSCluster(tb, n)
}

// NewDelayProxy returns a proxy to target that delays every byte by a
// delay the test sets.
func NewDelayProxy(target string) (*DelayProxy, error) { return servers.NewDelayProxy(target) }

// StartPostgres starts a Postgres with logical replication for the test.
func StartPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	return servers.StartPostgres(tb)
}

// StartPostgresMain starts a Postgres outside a test (a TestMain or an
// example program).
func StartPostgresMain() (*Postgres, error) { return servers.StartPostgresMain() }
