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
// With -status ADDR the relay process also serves its status page
// (/debug/informers/: leader or follower, term, published, stored, lag)
// and Prometheus /metrics on ADDR, and the demo prints what the page says
// of each relay. README.md shows the whole setup: a 3-node JetStream
// cluster, N replicas.
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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	prommetrics "github.com/dbinformer/dbinformer/metrics/prometheus"
	"github.com/dbinformer/dbinformer/relay"
	"github.com/dbinformer/dbinformer/statuspage"
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
	status := flag.String("status", "", "serve the relay process's status page (/debug/informers/) and /metrics on this address (default: off)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch *role {
	case "relay":
		err = runRelay(ctx, *conn, *natsURL, *status)
	case "downstream":
		err = runDownstream(ctx, *natsURL)
	case "":
		err = run(ctx, *conn, *natsURL, *replicas, *status, os.Stdout)
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

// run is the demo: servers, table, stream, three processes, writes, reads;
// with status (an address), the relay process serves its status page
// there, and the demo prints what it says of each relay.
// It is long on purpose and stays whole: an example is read in order, top
// to bottom, so its steps are not cut into functions.
func run(ctx context.Context, conn, natsURL string, replicas int, status string, w io.Writer) error {
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
	relayArgs, relayWaits := []string{"-role", "relay", "-conn", conn, "-nats", natsURL}, ""
	if status != "" {
		relayArgs, relayWaits = append(relayArgs, "-status", status), statusLine
	}
	relayProc, page, err := start(ctx, self, out, "relay", relayWaits, relayArgs...)
	if err != nil {
		return err
	}
	defer relayProc.stop()
	var downs []string
	for i := range 2 {
		p, addr, err := start(ctx, self, out, fmt.Sprintf("downstream-%d", i+1), listeningLine, "-role", "downstream", "-nats", natsURL)
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
	if page != "" {
		return printRelays(ctx, out, page)
	}
	return nil
}

// printRelays prints what the relay process's status page says of each
// relay (its JSON form) and each relay's published-messages counter
// from its /metrics.
func printRelays(ctx context.Context, out io.Writer, page string) error {
	body, err := get(ctx, page+"?format=json")
	if err != nil {
		return err
	}
	var st statuspage.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return fmt.Errorf("status page JSON: %w", err)
	}
	for _, r := range st.Relays {
		lag := "unknown"
		if r.LagVersions != nil {
			lag = strconv.FormatUint(*r.LagVersions, 10)
		}
		fmt.Fprintf(out, "relay %s: %s, epoch %d, published %d messages, stored up to %d, lag %s, relists %d\n",
			r.Name, r.Role, r.Epoch, r.Published, uint64(r.Stored), lag, r.Relists)
	}
	metrics, err := get(ctx, strings.TrimSuffix(page, "/debug/informers/")+"/metrics")
	if err != nil {
		return err
	}
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "dbinformer_relay_published_messages_total{") {
			fmt.Fprintf(out, "metric %s", line)
		}
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

// Lines a process prints that start waits for: its HTTP address (a
// downstream), its status page's URL (the relay, with -status).
const (
	listeningLine = "listening on "
	statusLine    = "status page: "
)

// start runs this binary with args; its stdout lines are printed with
// name. With wait set, it returns once the process has printed a line
// starting with wait, and the rest of that line.
func start(ctx context.Context, self string, out io.Writer, name, wait string, args ...string) (*proc, string, error) {
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
			if a, ok := strings.CutPrefix(line, wait); ok && wait != "" {
				select {
				case addrC <- a:
				default:
				}
			}
			fmt.Fprintf(out, "[%s] %s\n", name, line)
		}
		p.done <- cmd.Wait()
	}()
	if wait == "" {
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
//
// With status set, it serves the relays' status page and Prometheus
// metrics there (statuspage.Page.AddRelay, prommetrics.Provider.TrackRelay):
// each relay's part in the election, its term, what it published and
// JetStream stored, relists and failed terms, and the lag of the stream
// behind Postgres, read when asked.
func runRelay(ctx context.Context, conn, natsURL, status string) error {
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
	page := statuspage.New(statuspage.Options{Title: "relay example"})
	reg := prometheus.NewRegistry()
	pm, err := prommetrics.New(reg, prommetrics.Options{})
	if err != nil {
		return err
	}
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
		page.AddRelay(r)
		pm.TrackRelay(r)
		runs = append(runs, r.Run)
	}
	if status != "" {
		ln, err := net.Listen("tcp", status)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/debug/informers/", page) // the page, ?format=json
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		fmt.Printf("%shttp://%s/debug/informers/\n", statusLine, ln.Addr())
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
	fmt.Printf("%s%s\n", listeningLine, ln.Addr())
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
