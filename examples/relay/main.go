// Command relay shows the tables of one Postgres database re-served to
// other processes over NATS JetStream, and the commit LSN of a write used
// as a consistency token across processes:
//
//	go run ./examples/relay
//
// starts an embedded Postgres and nats-server (or uses yours: -conn and
// -nats), creates the tables items and tags and one relay stream per
// table, and runs three processes of this same binary: a relay (one Source
// reads both tables over one permanent replication slot; one Postgres
// election, shared by a relay per table through leader.Share, decides
// which process reads it) and two downstream processes (an informer per
// stream, served over HTTP). It then writes rows, takes
// pginformer.CommitToken, and asks each downstream over HTTP for a row "as
// of" that token: the downstream calls WaitFor(token) and answers from its
// cache, so it reads the write even though it never talked to Postgres.
// README.md shows the whole setup: a 3-node JetStream cluster, N replicas.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
)

// Item is a row of public.items.
type Item struct {
	ID    string `db:"id" json:"id"`
	Value int64  `db:"value" json:"value"`
}

// tables are the relayed tables, each with its stream and subject prefix.
var tables = []struct{ name, stream, prefix string }{
	{"items", "ITEMS", "relay.items"},
	{"tags", "TAGS", "relay.tags"},
}

// slot is the relay's permanent replication slot: a new leader resumes
// every table from it where the streams end, with no relist. On your own
// server, drop it when done: SELECT pg_drop_replication_slot('dbinformer_relay_example').
const slot = "dbinformer_relay_example"

func main() {
	role := flag.String("role", "", "internal: relay or downstream (the command starts them itself)")
	conn := flag.String("conn", os.Getenv("DATABASE_URL"), "Postgres connection string of a role with REPLICATION that may create tables (default: $DATABASE_URL, else an embedded server)")
	natsURL := flag.String("nats", "", "NATS URL with JetStream (default: an embedded server)")
	replicas := flag.Int("replicas", 1, "replicas of the relay stream (3 on a cluster)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch *role {
	case "relay":
		err = runRelay(ctx, *conn, *natsURL)
	case "downstream":
		err = runDownstream(ctx, *natsURL)
	case "":
		err = run(ctx, *conn, *natsURL, *replicas, os.Stdout)
	default:
		err = fmt.Errorf("unknown -role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay example:", err)
		os.Exit(1)
	}
}

// lockedWriter serialises the lines of the demo and of its processes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// run is the demo: servers, table, stream, three processes, writes, reads.
func run(ctx context.Context, conn, natsURL string, replicas int, w io.Writer) error {
	out := &lockedWriter{w: w}
	if conn == "" {
		pg, err := harness.StartPostgresMain()
		if err != nil {
			return fmt.Errorf("embedded Postgres: %w (or pass -conn)", err)
		}
		defer pg.Close()
		conn = pg.ConnString()
		fmt.Fprintln(out, "embedded Postgres started")
	}
	if natsURL == "" {
		dir, err := os.MkdirTemp("", "relay-example-nats")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
		if err != nil {
			return err
		}
		ns.Start()
		defer ns.WaitForShutdown()
		defer ns.Shutdown()
		if !ns.ReadyForConnections(30 * time.Second) {
			return errors.New("embedded nats-server not ready")
		}
		natsURL = ns.ClientURL()
		fmt.Fprintln(out, "embedded nats-server started")
	}
	db, err := pgx.Connect(ctx, conn)
	if err != nil {
		return fmt.Errorf("connect to Postgres: %w", err)
	}
	defer db.Close(context.Background())
	for _, tb := range tables {
		if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS public.`+tb.name+` (id text PRIMARY KEY, value bigint NOT NULL)`); err != nil {
			return fmt.Errorf("create table %s: %w", tb.name, err)
		}
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for _, tb := range tables {
		cfg := relay.StreamConfig(tb.stream, tb.prefix)
		cfg.Replicas = replicas
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("create the relay stream %s: %w", tb.stream, err)
		}
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	relayProc, _, err := start(ctx, self, out, "relay", "-role", "relay", "-conn", conn, "-nats", natsURL)
	if err != nil {
		return err
	}
	defer relayProc.stop()
	var downs []string
	for i := range 2 {
		p, addr, err := start(ctx, self, out, fmt.Sprintf("downstream-%d", i+1), "-role", "downstream", "-nats", natsURL)
		if err != nil {
			return err
		}
		defer p.stop()
		downs = append(downs, addr)
	}

	for i, v := range []int64{1, 2} {
		tb := tables[i%len(tables)]
		if _, err := db.Exec(ctx, `INSERT INTO public.`+tb.name+` (id, value) VALUES ('answer', $1) ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value`, v*21); err != nil {
			return err
		}
		// The token, read once the commit returned: right under every
		// synchronous_commit setting (pg_current_wal_lsn() is not).
		token, err := pginformer.CommitToken(ctx, db)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s answer=%d, token %s (%d)\n", tb.name, v*21, pglogrepl.LSN(token), uint64(token))
		// Another process reads its own write: the token goes over HTTP.
		addr := downs[i%len(downs)]
		body, err := get(ctx, fmt.Sprintf("http://%s/%s/answer?after=%d", addr, tb.name, uint64(token)))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "downstream-%d read %s after WaitFor(%d): %s\n", i%len(downs)+1, tb.name, uint64(token), body)
	}
	return nil
}

type proc struct {
	cmd  *exec.Cmd
	done chan error
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// start runs this binary with args; its stdout lines are printed with
// name, and a line "listening on ADDR" gives its HTTP address.
func start(ctx context.Context, self string, out io.Writer, name string, args ...string) (*proc, string, error) {
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	addrC := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if a, ok := strings.CutPrefix(line, "listening on "); ok {
				addrC <- a
			}
			fmt.Fprintf(out, "[%s] %s\n", name, line)
		}
		p.done <- cmd.Wait()
	}()
	if !strings.Contains(strings.Join(args, " "), "downstream") {
		return p, "", nil
	}
	select {
	case a := <-addrC:
		return p, a, nil
	case err := <-p.done:
		return nil, "", fmt.Errorf("%s exited: %v", name, err)
	case <-ctx.Done():
		p.stop()
		return nil, "", ctx.Err()
	}
}

func get(ctx context.Context, u string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	return strings.TrimSpace(string(b)), err
}

// runRelay is the relay process: one Source reads every table over one
// permanent replication slot (one walsender), and a relay per table
// publishes it into the table's stream. One election decides which
// process reads: its terms are shared by the relays (leader.Share), so
// that all tables move to a new leader together — the slot cannot be
// split between processes.
func runRelay(ctx context.Context, conn, natsURL string) error {
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	src, err := pginformer.NewSource(ctx, conn, pginformer.Options{PermanentSlot: true, Slot: slot, Logger: log})
	if err != nil {
		return err
	}
	defer src.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	el, err := leader.NewPostgres(conn, "relay-example", leader.PostgresOptions{Logger: log})
	if err != nil {
		return err
	}
	election := leader.Share(el)
	var runs []func(context.Context) error
	for _, tb := range tables {
		table, err := pginformer.NewTable[Item](ctx, src, tb.name, pginformer.TableOptions[Item]{})
		if err != nil {
			return err
		}
		r, err := relay.New(ctx, js, table, relay.Options[Item]{Stream: tb.stream, Prefix: tb.prefix, Elector: election.Member(), Logger: log})
		if err != nil {
			return err
		}
		runs = append(runs, r.Run)
	}
	runs = append(runs, election.Run)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(runs))
	for _, run := range runs {
		go func() { errs <- run(ctx) }()
	}
	var first error
	for range runs {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel() // one relay failed for good: stop the others
		}
	}
	return first
}

// runDownstream is a downstream process: an informer over the stream and
// GET /items/{id}?after=LSN, which waits for the LSN first.
func runDownstream(ctx context.Context, natsURL string) error {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	informers := map[string]*core.SharedIndexInformer[Item]{}
	done := make(chan error, len(tables))
	for _, tb := range tables {
		down, err := relay.NewDownstream(ctx, js, tb.stream, tb.prefix, relay.DownstreamOptions[Item]{})
		if err != nil {
			return err
		}
		inf := core.NewSharedIndexInformer[Item](down, core.InformerOptions[Item]{Name: tb.name})
		informers[tb.name] = inf
		go func() { done <- inf.Run(ctx) }()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{table}/{id}", func(w http.ResponseWriter, r *http.Request) {
		inf, ok := informers[r.PathValue("table")]
		if !ok {
			http.Error(w, fmt.Sprintf("no relayed table %q", r.PathValue("table")), http.StatusNotFound)
			return
		}
		if after := r.URL.Query().Get("after"); after != "" {
			n, err := strconv.ParseUint(after, 10, 64)
			if err != nil {
				http.Error(w, "after: not an LSN as a number", http.StatusBadRequest)
				return
			}
			if err := inf.WaitFor(r.Context(), core.ResourceVersion(n)); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		for _, it := range inf.Indexer().List() {
			if it.ID == r.PathValue("id") {
				_ = json.NewEncoder(w).Encode(it)
				return
			}
		}
		http.Error(w, fmt.Sprintf("no item %q in the cache at version %d", r.PathValue("id"), inf.AppliedVersion()), http.StatusNotFound)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux}
	fmt.Printf("listening on %s\n", ln.Addr())
	go func() { _ = srv.Serve(ln) }()
	<-ctx.Done()
	_ = srv.Close()
	var first error
	for range tables {
		if err := <-done; err != nil && first == nil {
			first = err
		}
	}
	return first
}
