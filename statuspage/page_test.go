package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/core/workqueue"
	"github.com/dbinformer/dbinformer/statuspage"
)

type user struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

// run starts inf until the test ends.
func run[T any](t *testing.T, inf *core.SharedIndexInformer[T]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Code, string(b)
}

func snapshotOf(t *testing.T, page *statuspage.Page, name string) statuspage.InformerStatus {
	t.Helper()
	for _, is := range page.Snapshot(context.Background()).Informers {
		if is.Name == name {
			return is
		}
	}
	t.Fatalf("informer %q not on the page", name)
	return statuspage.InformerStatus{}
}

// An informer over the in-memory source, held in the middle of its list
// and then in its watch: the page shows the progress, then the sync, the
// lag and the slow handler, in HTML, JSON and the probes.
func TestPageFollowsAnInformer(t *testing.T) {
	src := memory.New[user](memory.Options{})
	const n = 3000
	for i := range n {
		src.Put(fmt.Sprintf("u%04d", i), user{Name: fmt.Sprint("user ", i), Email: "secret-object-value@example.com"})
	}
	lw := newPausing[user](src, 2500)
	page := statuspage.New(statuspage.Options{Title: "test"})
	inf := core.NewSharedIndexInformer[user](lw, core.InformerOptions[user]{
		Name:         "users",
		Metrics:      page,
		ErrorHandler: page.ErrorHandler("users", nil),
	})
	page.Add(inf)
	slow := newBlocker[user]()
	if _, err := inf.AddEventHandlerWithOptions(slow, core.HandlerOptions{Name: "mailer"}); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandlerWithOptions(core.ResourceEventHandlerFuncs[user]{}, core.HandlerOptions{Name: "counter"}); err != nil {
		t.Fatal(err)
	}
	if err := page.Ready(context.Background()); !errors.Is(err, statuspage.ErrNotReady) {
		t.Fatalf("Ready before Run = %v, want ErrNotReady", err)
	}
	run(t, inf)
	t.Cleanup(slow.Release) // before the informer stops: its handler must return
	<-lw.ListPaused()

	// Held after 2,500 of 3,000: the last report was at 2,048.
	informertest.Eventually(t, "list progress on the page", func() bool {
		is := snapshotOf(t, page, "users")
		return is.Progress != nil && is.Progress.Received == 2048
	})
	is := snapshotOf(t, page, "users")
	if is.Synced || is.Progress.Estimated != n || is.Progress.Percent == nil || is.Progress.Relist {
		t.Fatalf("during the list: %+v %+v", is, *is.Progress)
	}
	if !strings.Contains(is.NotSyncedReason, "listing: 2,048 of ~3,000 objects (68%)") {
		t.Errorf("NotSyncedReason = %q", is.NotSyncedReason)
	}
	if is.Kind != "memory.Source" {
		t.Errorf("Kind = %q", is.Kind)
	}
	code, body := get(t, page, "/debug/informers/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-] users: listing: 2,048 of ~3,000") {
		t.Errorf("readyz during the list: %d %q", code, body)
	}
	if code, body := get(t, page, "/debug/informers/livez"); code != http.StatusOK {
		t.Errorf("livez during the list: %d %q", code, body)
	}
	_, html := get(t, page, "/debug/informers/")
	for _, want := range []string{`<progress value="2048" max="3000">`, `data-state="syncing"`, `http-equiv="refresh"`} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML during the list lacks %q", want)
		}
	}

	lw.ReleaseList()
	if err := inf.WaitForCacheSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	informertest.Eventually(t, "the page sees the sync", func() bool {
		return page.Ready(context.Background()) == nil
	})
	// The slow handler is stuck on its first add: the rest wait for it.
	<-slow.entered
	informertest.Eventually(t, "pending notifications", func() bool {
		is := snapshotOf(t, page, "users")
		return is.SlowestHandler == "mailer" && is.Handlers[0].Pending >= n-1
	})

	// Lag: the watch is held while the source moves on.
	release := lw.HoldWatch()
	for i := range 5 {
		src.Put(fmt.Sprintf("new%d", i), user{Name: "new"})
	}
	head := src.HeadRV()
	informertest.Eventually(t, "lag on the page", func() bool {
		is := snapshotOf(t, page, "users")
		return is.LagVersions != nil && *is.LagVersions == 5
	})
	is = snapshotOf(t, page, "users")
	if *is.HeadVersion != uint64(head) || is.LagSeconds == nil || is.Progress != nil || !is.Synced || is.Lists.Lists != 1 || is.Lists.ListedObjects != n {
		t.Fatalf("after the sync: %+v", is)
	}
	_, html = get(t, page, "/debug/informers/")
	for _, want := range []string{`data-state="synced"`, `<span class="lag-versions">5</span>`, `<strong class="slowest-handler">mailer</strong>`, `id="ready" class="badge ok"`} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML after the sync lacks %q", want)
		}
	}
	release()
	informertest.Eventually(t, "lag gone", func() bool {
		is := snapshotOf(t, page, "users")
		return is.LagVersions != nil && *is.LagVersions == 0
	})

	// JSON, by both addresses.
	for _, path := range []string{"/debug/informers/json", "/debug/informers/?format=json"} {
		code, body := get(t, page, path)
		var st statuspage.Status
		if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
			t.Fatalf("%s: %d %v", path, code, err)
		}
		if !st.Ready || !st.Live || len(st.Informers) != 1 || st.Informers[0].SlowestHandler != "mailer" {
			t.Errorf("%s: %+v", path, st)
		}
	}
	// No object content anywhere.
	for _, path := range []string{"/debug/informers/", "/debug/informers/json", "/debug/informers/readyz", "/debug/informers/livez"} {
		if _, body := get(t, page, path); strings.Contains(body, "secret-object-value") || strings.Contains(body, "user 1") {
			t.Errorf("%s shows object contents", path)
		}
	}
}

// fakeInformer answers what the page asks of an informer, as a test sets it.
type fakeInformer struct {
	name              string
	synced            bool
	applied, received core.ResourceVersion
	listErr           error
	head              *countingHead // nil: the source cannot tell its head
}

func (f *fakeInformer) Name() string { return f.name }
func (f *fakeInformer) SyncStatus() core.SyncStatus {
	st := core.SyncStatus{Started: true, Running: true, Synced: f.synced, AppliedVersion: f.applied, LastSyncResourceVersion: f.received, Source: "test"}
	if f.listErr != nil {
		st.ListFailures = core.Failures{Count: 1, Last: f.listErr}
	}
	return st
}
func (f *fakeInformer) Head(ctx context.Context) (core.ResourceVersion, error) {
	if f.head == nil {
		return 0, fmt.Errorf("no head: %w", errors.ErrUnsupported)
	}
	return f.head.Head(ctx)
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Progress, rate and ETA from ListProgress alone; the report that repeats
// a finished list's count is not a new list; a relist shows as one.
func TestProgressRateAndETA(t *testing.T) {
	clk := clock.NewFake(t0)
	page := statuspage.New(statuspage.Options{Clock: clk})
	m := page.InformerMetrics("orders")
	m.ListProgress(0, 10000)
	clk.Step(2 * time.Second)
	m.ListProgress(4096, 10000)
	is := snapshotOf(t, page, "orders")
	pr := is.Progress
	if pr == nil || pr.Received != 4096 || *pr.Percent < 40.9 || *pr.Percent > 41 || pr.RatePerSecond != 2048 || *pr.ETASeconds != float64(10000-4096)/2048 {
		t.Fatalf("progress = %+v", pr)
	}
	if is.Synced || !strings.Contains(is.NotSyncedReason, "listing: 4,096 of ~10,000 objects (41%), 2,048/s, about 3s left") {
		t.Fatalf("reason = %q", is.NotSyncedReason)
	}
	m.Listed(false, 10000, nil)
	m.ListProgress(10000, 10000)
	is = snapshotOf(t, page, "orders")
	if is.Progress != nil || !is.Synced || is.Lists.Lists != 1 || is.Lists.ListedObjects != 10000 {
		t.Fatalf("after the list: %+v", is)
	}
	// Without an estimate: no percent, no ETA, a rate.
	m.WatchRestarted(fmt.Errorf("watch: %w", driver.ErrExpired))
	m.ListProgress(1024, 0)
	clk.Step(time.Second)
	m.ListProgress(3072, 0)
	is = snapshotOf(t, page, "orders")
	if pr := is.Progress; pr == nil || !pr.Relist || pr.Percent != nil || pr.ETASeconds != nil || pr.RatePerSecond != 2048 || !is.Synced {
		t.Fatalf("relist: %+v", is)
	}
	if is.WatchRestarts.Expired != 1 || !strings.HasPrefix(is.WatchRestarts.LastReason, "expired, relisting") {
		t.Errorf("restarts = %+v", is.WatchRestarts)
	}
}

// Readiness says why not; liveness does not flap on relists, expired
// versions or a failing source, and fails on a permanent failure and a
// stall.
func TestHealth(t *testing.T) {
	clk := clock.NewFake(t0)
	page := statuspage.New(statuspage.Options{Clock: clk, StallTimeout: time.Minute})
	a := &fakeInformer{name: "a"}
	b := &fakeInformer{name: "b", synced: true, applied: 7, received: 7}
	page.Add(a)
	page.Add(b)
	ma, mb := page.InformerMetrics("a"), page.InformerMetrics("b")

	a.listErr = errors.New("a: list: connection refused")
	ma.Listed(false, 0, a.listErr)
	err := page.Ready(context.Background())
	if !errors.Is(err, statuspage.ErrNotReady) || !strings.Contains(err.Error(), "a: last list error: a: list: connection refused") || strings.Contains(err.Error(), "b:") {
		t.Fatalf("Ready = %v", err)
	}
	if err := page.Live(context.Background()); err != nil {
		t.Fatalf("Live with a failing list = %v (the informer retries)", err)
	}
	if is := snapshotOf(t, page, "a"); !strings.Contains(is.Retrying, "list failed: a: list: connection refused") {
		t.Errorf("Retrying = %q", is.Retrying)
	}
	a.listErr, a.synced, a.applied, a.received = nil, true, 3, 3
	ma.Listed(false, 3, nil)
	ma.Applied(3)
	if err := page.Ready(context.Background()); err != nil {
		t.Fatalf("Ready = %v", err)
	}

	// Relists, expiries and watch errors, however many and however long:
	// live.
	for range 10 {
		mb.WatchRestarted(driver.ErrExpired)
		mb.ListProgress(1024, 0)
		clk.Step(time.Hour)
		mb.Listed(true, 0, errors.New("relist failed"))
		mb.WatchRestarted(errors.New("connection reset"))
		if err := page.Live(context.Background()); err != nil {
			t.Fatalf("Live during relists = %v", err)
		}
	}
	code, body := get(t, page.LiveHandler(), "/livez")
	if code != http.StatusOK || !strings.Contains(body, "[+] b live (retrying since") {
		t.Errorf("livez: %d %q", code, body)
	}

	// A stall: b received 9 but applies nothing for a minute.
	b.received = 9
	page.Snapshot(context.Background()) // the page notes when applied last moved
	clk.Step(59 * time.Second)
	if err := page.Live(context.Background()); err != nil {
		t.Fatalf("Live before StallTimeout = %v", err)
	}
	clk.Step(time.Second)
	err = page.Live(context.Background())
	if !errors.Is(err, statuspage.ErrNotLive) || !strings.Contains(err.Error(), "b: stalled: received version 9 but the applied version has stayed at 7 for 1m0s") {
		t.Fatalf("Live when stalled = %v", err)
	}
	b.applied = 9
	if err := page.Live(context.Background()); err != nil {
		t.Fatalf("Live after the stall = %v", err)
	}

	// A permanent failure ends the run: not live, not ready.
	a.synced = false
	ma.WatchRestarted(driver.Permanent(errors.New(`bucket "a" deleted`)))
	code, body = get(t, page.LiveHandler(), "/livez")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `[-] a: stopped: failed permanently at 2026-01-`) || !strings.Contains(body, `bucket "a" deleted`) {
		t.Errorf("livez: %d %q", code, body)
	}
	code, body = get(t, page.ReadyHandler(), "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `[-] a: failed permanently: bucket "a" deleted`) {
		t.Errorf("readyz: %d %q", code, body)
	}
}

// Nothing secret on the page: a name holding a connection string, a
// decode error, a list error and a handler name with credentials.
func TestNoSecrets(t *testing.T) {
	page := statuspage.New(statuspage.Options{})
	name := "postgres://app:hunter2@db.internal:5432/prod?sslmode=verify-full&password=hunter3 users"
	inf := &fakeInformer{name: name, listErr: errors.New("list: dial nats://tok3n-abc@nats:4222 failed; token=tok3n-def")}
	page.Add(inf)
	m := page.InformerMetrics(name)
	m.Listed(false, 0, inf.listErr)
	m.PendingNotifications("sync to https://svc:p4ss@api.example/hook", 3)
	m.WatchRestarted(errors.New("auth failed: Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"))
	m.DecodeFailed()
	page.ErrorHandler(name, nil)(&driver.DecodeError{Source: "nats kv \"users\"", Key: "u1", RV: 9, Err: errors.New("json: cannot unmarshal number into Go struct field user.name of type string")})
	qm := page.NewDepthMetric("retry password=qpass")
	qm.Inc()

	for _, path := range []string{"/debug/informers/", "/debug/informers/json", "/debug/informers/readyz", "/debug/informers/livez"} {
		_, body := get(t, page, path)
		for _, secret := range []string{"hunter2", "hunter3", "tok3n", "p4ss", "eyJhbGciOiJIUzI1NiJ9", "qpass"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s shows %q:\n%s", path, secret, body)
			}
		}
	}
	_, body := get(t, page, "/debug/informers/json")
	for _, want := range []string{"postgres://REDACTED@db.internal:5432/prod", `key \"u1\" at version 9`, "REDACTED"} {
		if !strings.Contains(body, want) {
			t.Errorf("JSON lacks %q", want)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h/db":                                              "postgres://REDACTED@h/db",
		"host=h user=u password=secret dbname=x":                           "host=h user=u password=REDACTED dbname=x",
		"password='a b c' x":                                               "password=REDACTED x",
		`{"api_key": "k123"}`:                                              `{"api_key": REDACTED}`,
		"Authorization: Bearer abcdefghijkl":                               "Authorization: Bearer REDACTED",
		"authorization=s3cr3t x":                                           "authorization=REDACTED x",
		"sslpassword=x nkey_seed=SUAB":                                     "sslpassword=REDACTED nkey_seed=REDACTED",
		"creds SUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QMDU3GTIUWEI5LDNOXD43IZY": "creds REDACTED",
		"users (nats kv)":                                                  "users (nats kv)",
		"key \"u1\" at version 9":                                          "key \"u1\" at version 9",
	} {
		if got := statuspage.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// The work queue's metrics reach every page a workqueue.MultiMetrics feeds.
func TestWorkQueue(t *testing.T) {
	page, other := statuspage.New(statuspage.Options{}), statuspage.New(statuspage.Options{})
	// A fake clock holds the rate-limited "c" back for the whole test, so
	// the counts below do not depend on how fast the test runs.
	q := workqueue.New(workqueue.Options[string]{Name: "reconcile", Clock: clock.NewFake(t0), MetricsProvider: workqueue.MultiMetrics(page, nil, other)})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	q.Add("a")
	q.AddRateLimited("c")
	item, _ := q.Get()
	q.Done(item)
	for _, p := range []*statuspage.Page{page, other} {
		st := p.Snapshot(context.Background())
		if len(st.Queues) != 1 {
			t.Fatalf("queues = %+v", st.Queues)
		}
		qs := st.Queues[0]
		if qs.Name != "reconcile" || qs.Depth != 1 || qs.Adds != 2 || qs.Retries != 1 || qs.Processed != 1 {
			t.Errorf("queue = %+v", qs)
		}
	}
	_, html := get(t, page, "/debug/informers/")
	if !strings.Contains(html, `data-queue="reconcile"`) {
		t.Error("HTML lacks the queue")
	}
	if workqueue.MultiMetrics(nil) != nil || workqueue.MultiMetrics(page, nil) != workqueue.MetricsProvider(page) {
		t.Error("TeeQueues of one or none")
	}
}

// core.MultiMetrics feeds every provider.
func TestMultiMetrics(t *testing.T) {
	a, b := statuspage.New(statuspage.Options{}), statuspage.New(statuspage.Options{})
	m := core.MultiMetrics(a, nil, b).InformerMetrics("x")
	m.Listed(false, 4, nil)
	m.DecodeFailed()
	for _, p := range []*statuspage.Page{a, b} {
		is := snapshotOf(t, p, "x")
		if !is.Synced || is.DecodeErrors.Count != 1 || !is.Metrics {
			t.Errorf("%+v", is)
		}
	}
	if core.MultiMetrics(nil, nil) != nil || core.MultiMetrics(a) != core.MetricsProvider(a) {
		t.Error("Tee of one or none")
	}
}

// PrintProgress prints progress lines until every informer has synced.
func TestPrintProgress(t *testing.T) {
	clk := clock.NewFake(t0)
	page := statuspage.New(statuspage.Options{Clock: clk})
	a := &fakeInformer{name: "users"}
	page.Add(a)
	m := page.InformerMetrics("users")
	m.ListProgress(0, 5000)
	clk.Step(time.Second)
	m.ListProgress(2048, 5000)

	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- page.PrintProgress(context.Background(), &out, time.Second) }()
	informertest.Eventually(t, "the first line", func() bool { return clk.HasWaiters() })
	m.Listed(false, 5000, nil)
	m.ListProgress(5000, 5000)
	a.synced = true
	clk.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := "users  [########------------]  2,048 of ~5,000 objects (41%), 2,048/s, about 1s left\n" +
		"users  synced: 5,000 objects, after 1s\n"
	if got := out.String(); got != want {
		t.Errorf("printed:\n%s\nwant:\n%s", got, want)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A change that does not decode: counted, and named by key and version
// (never its value) through Page.ErrorHandler.
func TestDecodeErrors(t *testing.T) {
	src := memory.New[user](memory.Options{})
	src.Put("good", user{Name: "g"})
	page := statuspage.New(statuspage.Options{})
	errs := &informertest.Errors{}
	inf := core.NewSharedIndexInformer[user](src, core.InformerOptions[user]{
		Name: "users", Metrics: page,
		ErrorHandler: page.ErrorHandler("users", errs.Add),
	})
	page.Add(inf)
	run(t, inf)
	if err := inf.WaitForCacheSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// After the list: the bad value is only in the watch stream.
	rv := src.InjectDecodeError("bad", errors.New("json: cannot unmarshal number into Go struct field user.name of type string"))
	informertest.Eventually(t, "the decode error on the page", func() bool {
		d := snapshotOf(t, page, "users").DecodeErrors
		// The page records the error before passing it on to next, so
		// wait for both.
		return d.Count == 1 && d.Last != "" && errs.Len() >= 1
	})
	is := snapshotOf(t, page, "users")
	want := fmt.Sprintf(`key "bad" at version %d: json: cannot unmarshal number`, rv)
	if !strings.Contains(is.DecodeErrors.Last, want) || is.DecodeErrors.LastAt == nil {
		t.Errorf("DecodeErrors = %+v, want Last containing %q", is.DecodeErrors, want)
	}
	if errs.Len() != 1 {
		t.Errorf("next got %v", errs.All())
	}
	_, html := get(t, page, "/debug/informers/")
	if !strings.Contains(html, "key &#34;bad&#34; at version") {
		t.Error("HTML lacks the decode error")
	}
}

// countingHead is a HeadReader whose head the test sets; it counts reads.
type countingHead struct {
	mu    sync.Mutex
	head  core.ResourceVersion
	err   error
	reads int
}

func (h *countingHead) Head(context.Context) (core.ResourceVersion, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads++
	return h.head, h.err
}

func (h *countingHead) fail(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
}

func (h *countingHead) set(rv core.ResourceVersion) {
	h.mu.Lock()
	h.head = rv
	h.mu.Unlock()
}

func (h *countingHead) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reads
}

// Run samples heads in the background, so the lag in seconds dates from
// when the head moved, not from when someone looked.
func TestRunSamplesHeads(t *testing.T) {
	clk := clock.NewFake(t0)
	page := statuspage.New(statuspage.Options{Clock: clk, HeadInterval: time.Second})
	head := &countingHead{head: 5}
	inf := &fakeInformer{name: "x", synced: true, applied: 5, received: 5, head: head}
	page.Add(inf)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- page.Run(ctx) }()
	informertest.Eventually(t, "the first read", func() bool { return head.count() == 1 && clk.HasWaiters() })
	head.set(8) // the source moves on; the cache does not
	clk.Step(time.Second)
	informertest.Eventually(t, "the second read", func() bool { return head.count() == 2 })
	clk.Step(30 * time.Second)
	// Nobody looked in between: the page still dates the lag from the
	// background read 30s ago.
	is := snapshotOf(t, page, "x")
	if is.LagVersions == nil || *is.LagVersions != 3 || is.LagSeconds == nil || *is.LagSeconds < 30 {
		t.Errorf("lag = %v versions, %v seconds", is.LagVersions, is.LagSeconds)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
}
