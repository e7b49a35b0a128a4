package servers

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeAPIServerEnv names an environment variable holding the path of a
// kube-apiserver binary to use instead of the one built by
// scripts/build-kube-apiserver.sh.
const KubeAPIServerEnv = "KUBE_APISERVER"

const (
	// kubeReadyTimeout bounds a start: a kube-apiserver is usually ready
	// in a few seconds, but a loaded 2-core machine can take much longer to
	// run its post-start hooks.
	kubeReadyTimeout = 3 * time.Minute
	// kubeStopGrace is how long a stopping kube-apiserver gets after
	// SIGTERM before it is killed.
	kubeStopGrace = 10 * time.Second
)

// Kube is a real kube-apiserver running as a child process, listening on
// 127.0.0.1 on a port picked at start, backed by its own embedded etcd
// (under a prefix unique to the test), with a generated admin token and
// service-account key and its serving certificates in a temp dir. Clients
// authenticate with the token as a member of system:masters; authorization
// is AlwaysAllow. It is stopped when the test ends.
type Kube struct {
	// Etcd is the server the apiserver stores its data in, for tests that
	// compact it or stop it.
	Etcd *Etcd

	tb         testing.TB
	bin        string
	dir        string
	prefix     string
	port       int
	token      string
	log        *LogBuffer
	cfg        *rest.Config
	kubeconfig string

	mu   sync.Mutex
	proc *kubeProcess // nil while stopped
}

type kubeProcess struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // cmd.Wait's result, valid after done
}

// StartKube starts a kube-apiserver (and the etcd behind it) and stops both
// when the test ends. The binary comes from $KUBE_APISERVER, or else from
// scripts/build-kube-apiserver.sh, which builds it into
// ~/.cache/dbinformer on first use (several minutes) and reuses it after.
// When no binary can be had the test is skipped, or fails under CI=true.
func StartKube(tb testing.TB) *Kube {
	tb.Helper()
	bin, err := KubeAPIServerBinary()
	if err != nil {
		Unavailable(tb, "kube-apiserver: %v (run scripts/build-kube-apiserver.sh, which needs Go and access to the Go module proxy, or set %s to a kube-apiserver v1.36 binary)", err, KubeAPIServerEnv)
		return nil
	}
	k := &Kube{
		tb:     tb,
		bin:    bin,
		dir:    tb.TempDir(),
		prefix: "/registry-" + randomHex(tb, 6),
		token:  randomHex(tb, 24),
		log:    NewLogBuffer(tb, "kube-apiserver"),
	}
	k.Etcd = StartEtcd(tb)
	k.writeAuthFiles(tb)
	tb.Cleanup(k.Stop)

	// The picked port can be taken before the apiserver binds it: try a
	// few ports.
	for attempt := 0; ; attempt++ {
		k.port = FreePort(tb)
		err = k.start()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(k.log.String(), "address already in use") {
			tb.Fatalf("harness: start kube-apiserver: %v", err)
		}
	}
	k.makeClientConfig(tb)
	return k
}

var kubeBinary struct {
	mu   sync.Mutex
	path string
}

// KubeAPIServerBinary returns the path of the kube-apiserver binary: the
// value of $KUBE_APISERVER, or the cached build of
// scripts/build-kube-apiserver.sh, which it runs (building only when the
// cached binary is missing or stale).
func KubeAPIServerBinary() (string, error) {
	if p := os.Getenv(KubeAPIServerEnv); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return "", fmt.Errorf("%s=%q is not a file", KubeAPIServerEnv, p)
		}
		return p, nil
	}
	kubeBinary.mu.Lock()
	defer kubeBinary.mu.Unlock()
	if kubeBinary.path != "" {
		return kubeBinary.path, nil
	}
	script, err := findRepoFile(filepath.Join("scripts", "build-kube-apiserver.sh"))
	if err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "harness: ensuring the kube-apiserver binary with %s (a cold build takes several minutes)\n", script)
	var stderr bytes.Buffer
	cmd := exec.Command("bash", script)
	// Shown as it happens (a cold build is long) and kept for the error.
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s failed: %w\n%s", script, err, tail(stderr.String(), 4000))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	path := strings.TrimSpace(lines[len(lines)-1])
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		return "", fmt.Errorf("%s printed %q, which is not a file", script, path)
	}
	kubeBinary.path = path
	return path, nil
}

// findRepoFile looks for rel in the working directory and its parents (go
// test runs in the package directory, somewhere inside the repository).
func findRepoFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s in the working directory or its parents", rel)
		}
		dir = parent
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func randomHex(tb testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatalf("harness: random: %v", err)
	}
	return hex.EncodeToString(b)
}

func (k *Kube) writeAuthFiles(tb testing.TB) {
	tb.Helper()
	// token,user,uid,groups: the one user is a cluster admin.
	tokens := k.token + ",dbinformer-admin,dbinformer-admin,system:masters\n"
	if err := os.WriteFile(filepath.Join(k.dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		tb.Fatalf("harness: write kube token file: %v", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("harness: generate service-account key: %v", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatalf("harness: encode service-account key: %v", err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(filepath.Join(k.dir, "sa.key"), pemKey, 0o600); err != nil {
		tb.Fatalf("harness: write service-account key: %v", err)
	}
}

func (k *Kube) args() []string {
	return []string{
		"--etcd-servers=" + strings.Join(k.Etcd.Endpoints(), ","),
		"--etcd-prefix=" + k.prefix,
		// Tests compact etcd themselves, at points they choose.
		"--etcd-compaction-interval=0",
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(k.port),
		"--cert-dir=" + filepath.Join(k.dir, "certs"),
		"--token-auth-file=" + filepath.Join(k.dir, "tokens.csv"),
		"--authorization-mode=AlwaysAllow",
		"--service-account-key-file=" + filepath.Join(k.dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(k.dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.0.0.0/24",
		// No controller-manager runs, so nothing creates the default
		// service accounts that this plugin requires of every pod.
		"--disable-admission-plugins=ServiceAccount",
		// 127.0.0.1 is not a valid endpoint address for the "kubernetes"
		// service; nothing here needs that service.
		"--endpoint-reconciler-type=none",
		// Less background work on a shared machine.
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=1",
	}
}

// start launches the process and waits until /readyz answers 200.
func (k *Kube) start() error {
	cmd := exec.Command(k.bin, k.args()...)
	cmd.Stdout = k.log
	cmd.Stderr = k.log
	cmd.Dir = k.dir
	setKubeProcAttr(cmd)
	fmt.Fprintf(k.log, "harness: starting %s on 127.0.0.1:%d\n", k.bin, k.port)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", k.bin, err)
	}
	p := &kubeProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	k.mu.Lock()
	k.proc = p
	k.mu.Unlock()
	if err := k.waitReady(p); err != nil {
		k.Stop()
		return err
	}
	return nil
}

func (k *Kube) waitReady(p *kubeProcess) error {
	client := &http.Client{
		Timeout: 5 * time.Second,
		// Only the readiness probe skips verification; clients get the CA.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", k.port)
	deadline := time.Now().Add(kubeReadyTimeout)
	var last string
	for {
		select {
		case <-p.done:
			return fmt.Errorf("kube-apiserver exited before it was ready: %v (its log is printed below)", p.err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready within %v; last /readyz answer: %s", kubeReadyTimeout, last)
		}
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+k.token)
		resp, err := client.Do(req)
		if err == nil {
			body := make([]byte, 2048)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(body[:n]))
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (k *Kube) makeClientConfig(tb testing.TB) {
	tb.Helper()
	ca, err := servingCA(filepath.Join(k.dir, "certs", "apiserver.crt"))
	if err != nil {
		tb.Fatalf("harness: kube-apiserver serving certificate: %v", err)
	}
	host := fmt.Sprintf("https://127.0.0.1:%d", k.port)
	k.cfg = &rest.Config{
		Host:            host,
		BearerToken:     k.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		// client-go's default of 5 requests per second would throttle the
		// tests' workloads, not the server.
		QPS:   1000,
		Burst: 2000,
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: k.token}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "test"
	k.kubeconfig = filepath.Join(k.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, k.kubeconfig); err != nil {
		tb.Fatalf("harness: write kubeconfig: %v", err)
	}
}

// servingCA returns the CA certificate of the self-signed serving
// certificate that kube-apiserver generated in --cert-dir: the file holds
// the serving certificate followed by the CA that signed it.
func servingCA(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var last []byte
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			last = pem.EncodeToMemory(b)
		}
	}
	if last == nil {
		return nil, errors.New("no certificate in " + path)
	}
	return last, nil
}

// Config returns a new client config for the admin user: bearer token, the
// server's CA, high QPS and Burst. Callers may change their copy.
func (k *Kube) Config() *rest.Config { return rest.CopyConfig(k.cfg) }

// Kubeconfig returns the path of a kubeconfig file for the same user, with
// "default" as the namespace of its current context.
func (k *Kube) Kubeconfig() string { return k.kubeconfig }

// Client returns a typed clientset for the admin user.
func (k *Kube) Client(tb testing.TB) kubernetes.Interface {
	tb.Helper()
	cs, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		tb.Fatalf("harness: kubernetes clientset: %v", err)
	}
	return cs
}

// CompactEtcd compacts the etcd behind the apiserver at its current
// revision and returns that revision. Lists continuing an older snapshot,
// and watches that the apiserver serves from etcd, then get 410 Gone. A
// watch served from the apiserver's watch cache can still resume from
// versions the cache holds; use Expire to make those unreachable too.
func (k *Kube) CompactEtcd(tb testing.TB) int64 {
	tb.Helper()
	rev := k.Etcd.Head(tb)
	k.Etcd.Compact(tb, rev)
	return rev
}

// Expire makes every version up to the current one unreachable for
// watches, as after a long disconnection: it compacts etcd at its head and
// restarts the apiserver, whose new watch cache starts after that head.
// Watches from older versions then end with 410 Gone.
func (k *Kube) Expire(tb testing.TB) {
	tb.Helper()
	k.CompactEtcd(tb)
	k.Restart(tb)
}

// Restart stops the apiserver and starts it again on the same port, data
// and certificates. Clients keep working after it is ready again.
func (k *Kube) Restart(tb testing.TB) {
	tb.Helper()
	k.Stop()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = k.start(); err == nil {
			return
		}
		if !strings.Contains(lastLines(k.log.String(), 20), "address already in use") {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	tb.Fatalf("harness: restart kube-apiserver: %v", err)
}

func lastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// Running reports whether the apiserver process runs: false after Stop
// until Restart.
func (k *Kube) Running() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.proc != nil
}

// Stop stops the apiserver (SIGTERM to its process group, SIGKILL after a
// grace period) and waits for it. Stopping a stopped server does nothing.
func (k *Kube) Stop() {
	k.mu.Lock()
	p := k.proc
	k.proc = nil
	k.mu.Unlock()
	if p == nil {
		return
	}
	signalKubeProcess(p.cmd, false)
	select {
	case <-p.done:
		return
	case <-time.After(kubeStopGrace):
	}
	signalKubeProcess(p.cmd, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		k.tb.Errorf("harness: kube-apiserver (pid %d) did not exit after SIGKILL", p.cmd.Process.Pid)
	}
}
