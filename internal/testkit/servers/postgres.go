package servers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const postgresHowTo = "run `make test` (scripts/ensure-postgres.sh installs Debian's postgresql)"

// Postgres is a throwaway PostgreSQL server with wal_level=logical, listening
// on 127.0.0.1 on a port of its own, its data in a temp dir. The superuser
// has a random password that tests can look for in errors and logs.
type Postgres struct {
	Port     int
	User     string
	Password string
	Database string

	bin     string
	dir     string // owned by the server's OS user
	dataDir string
	logFile string
	asUser  string // non-empty when the server runs as another OS user (we are root)

	mu      sync.Mutex
	running bool
	log     string // set by Close
}

// StartPostgres initdb's and starts a server for tb; it is stopped and its
// files removed when tb ends, and its log is printed if tb failed.
func StartPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	lb := NewLogBuffer(tb, "postgres")
	p, err := startPostgres()
	if p != nil {
		// Runs before lb's cleanup (LIFO), so lb sees the whole log.
		tb.Cleanup(func() {
			p.Close()
			lb.Write([]byte(p.Log()))
		})
	}
	var un *unavailableError
	if errors.As(err, &un) {
		Unavailable(tb, "%v; %s", err, postgresHowTo)
		return nil
	}
	if err != nil {
		tb.Fatalf("harness: %v", err)
	}
	return p
}

// StartPostgresMain starts a server outside of any test, for a TestMain
// that serves runnable examples (which get no testing.TB). The caller calls
// Close. When the binaries are missing the error says how to get them.
func StartPostgresMain() (*Postgres, error) {
	p, err := startPostgres()
	if err != nil && p != nil {
		p.Close()
	}
	var un *unavailableError
	if errors.As(err, &un) {
		return nil, fmt.Errorf("%w; %s", err, postgresHowTo)
	}
	return p, err
}

type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }

// Close stops the server (immediate) and removes its files.
func (p *Postgres) Close() {
	p.stop("immediate")
	if b, err := os.ReadFile(p.logFile); err == nil {
		p.mu.Lock()
		p.log = string(b)
		p.mu.Unlock()
	}
	os.RemoveAll(p.dir)
}

// Log returns the server log (as of Close, once closed).
func (p *Postgres) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.log != "" {
		return p.log
	}
	b, _ := os.ReadFile(p.logFile)
	return string(b)
}

func startPostgres() (*Postgres, error) {
	bin, err := findPostgresBin()
	if err != nil {
		return nil, &unavailableError{err.Error()}
	}
	p := &Postgres{User: "postgres", Database: "postgres", bin: bin}
	if os.Geteuid() == 0 {
		// The server refuses to run as root.
		p.asUser = "postgres"
	}
	var uid, gid = -1, -1
	if p.asUser != "" {
		u, err := user.Lookup(p.asUser)
		if err != nil {
			return nil, &unavailableError{fmt.Sprintf("running as root and there is no %q OS user to run the server as: %v", p.asUser, err)}
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	// tb.TempDir() sits below a 0700 directory of the test process, which
	// another OS user cannot enter, so the server gets a dir of its own.
	p.dir, err = os.MkdirTemp("", "dbinformer-pg-")
	if err != nil {
		return nil, fmt.Errorf("postgres temp dir: %w", err)
	}
	if uid >= 0 {
		if err := os.Chown(p.dir, uid, gid); err != nil {
			return p, fmt.Errorf("chown postgres temp dir: %w", err)
		}
	}
	p.dataDir = filepath.Join(p.dir, "data")
	p.logFile = filepath.Join(p.dir, "server.log")

	var pw [12]byte
	rand.Read(pw[:])
	p.Password = "pw" + hex.EncodeToString(pw[:])
	pwFile := filepath.Join(p.dir, "pwfile")
	if err := os.WriteFile(pwFile, []byte(p.Password+"\n"), 0o600); err != nil {
		return p, err
	}
	if uid >= 0 {
		os.Chown(pwFile, uid, gid)
	}
	out, err := p.run(context.Background(), "initdb", "-D", p.dataDir, "-U", p.User, "--pwfile="+pwFile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync")
	os.Remove(pwFile)
	if err != nil {
		return p, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return p, err
	}
	p.Port = port
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
wal_level = logical
max_replication_slots = 40
max_wal_senders = 40
max_connections = 200
fsync = off
full_page_writes = off
shared_buffers = 32MB
log_min_messages = info
log_line_prefix = '%%m [%%p] %%u '
`, p.Port, p.dir)
	f, err := os.OpenFile(filepath.Join(p.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return p, err
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		return p, err
	}
	return p, p.start()
}

func findPostgresBin() (string, error) {
	ok := func(dir string) bool {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); ok(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if ok(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && ok(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if ok(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	return "", fmt.Errorf("postgres server binaries (initdb, pg_ctl, postgres) not found in `pg_config --bindir`, /usr/lib/postgresql/*/bin or PATH")
}

func (p *Postgres) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	path := filepath.Join(p.bin, prog)
	var cmd *exec.Cmd
	if p.asUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", p.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = p.dir
	// pg_ctl start leaves the postmaster running; detach it from our
	// process group so that a ^C of go test does not orphan it half-dead.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.CombinedOutput()
}

// Start starts the (stopped) server and waits until it accepts connections.
func (p *Postgres) Start(tb testing.TB) {
	tb.Helper()
	if err := p.start(); err != nil {
		tb.Fatalf("harness: %v", err)
	}
}

func (p *Postgres) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := p.run(ctx, "pg_ctl", "-D", p.dataDir, "-l", p.logFile, "-w", "-t", "90", "start")
	if err != nil {
		log, _ := os.ReadFile(p.logFile)
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	p.running = true
	return nil
}

// Stop stops the server; mode is "fast" (clean shutdown) or "immediate"
// (like a crash: no checkpoint, recovery at the next start).
func (p *Postgres) Stop(tb testing.TB, mode string) {
	tb.Helper()
	if out, err := p.stop(mode); err != nil {
		tb.Fatalf("harness: pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
}

func (p *Postgres) stop(mode string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := p.run(ctx, "pg_ctl", "-D", p.dataDir, "-m", mode, "-w", "-t", "90", "stop")
	if err == nil {
		p.running = false
	}
	return out, err
}

// Restart stops the server with mode ("fast" or "immediate") and starts it
// again on the same port.
func (p *Postgres) Restart(tb testing.TB, mode string) {
	tb.Helper()
	p.Stop(tb, mode)
	p.Start(tb)
}

// Bin is the path of the server's client program prog (psql, pg_dump),
// from the same installation as the server.
func (p *Postgres) Bin(prog string) string { return filepath.Join(p.bin, prog) }

// ConnString is a key=value connection string for the superuser over TCP.
func (p *Postgres) ConnString() string {
	return p.connString(p.User, p.Password, "")
}

// ReplicationConnString is ConnString with replication=database, for a
// logical replication connection.
func (p *Postgres) ReplicationConnString() string {
	return p.connString(p.User, p.Password, "database")
}

// URL is ConnString as a postgres:// URL.
func (p *Postgres) URL() string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(p.User, p.Password),
		Host: "127.0.0.1:" + strconv.Itoa(p.Port), Path: "/" + p.Database, RawQuery: "sslmode=disable"}
	return u.String()
}

func (p *Postgres) connString(user, password, replication string) string {
	s := fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=disable connect_timeout=10",
		p.Port, quoteConnValue(user), quoteConnValue(password), quoteConnValue(p.Database))
	if replication != "" {
		s += " replication=" + replication
	}
	return s
}

func quoteConnValue(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// Conn opens a superuser connection closed at the end of tb.
func (p *Postgres) Conn(tb testing.TB) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, p.ConnString())
	if err != nil {
		tb.Fatalf("harness: connect to postgres: %v", err)
	}
	tb.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// Exec runs sql (one or more statements, no parameters) as the superuser
// on a fresh connection.
func (p *Postgres) Exec(tb testing.TB, sql string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, p.ConnString())
	if err != nil {
		tb.Fatalf("harness: connect to postgres: %v", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		tb.Fatalf("harness: exec %q: %v", sql, err)
	}
}

// CreateRole creates a LOGIN role with a password and the given extra
// attributes (e.g. "REPLICATION", "NOREPLICATION"), and returns a
// connection string for it (without replication=...).
func (p *Postgres) CreateRole(tb testing.TB, name, attrs string) string {
	tb.Helper()
	var pw [8]byte
	rand.Read(pw[:])
	password := "rpw" + hex.EncodeToString(pw[:])
	p.Exec(tb, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s' %s", pgx.Identifier{name}.Sanitize(), password, attrs))
	return p.connString(name, password, "")
}
