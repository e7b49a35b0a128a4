package statuspage_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/dbinformer/dbinformer/integration/harness"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/workqueue"
	"github.com/dbinformer/dbinformer/statuspage"
)

// findChromium finds Debian's chromium (scripts/ensure-chromium.sh, run by
// make deps, installs it): $CHROMIUM, then PATH, then /usr/bin/chromium.
// Under CI=true a missing browser fails the test; elsewhere it skips, saying
// how to install one.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	harness.Unavailable(t, "chromium not found (set CHROMIUM, or install Debian's chromium: make deps, or bash scripts/ensure-chromium.sh)")
	return ""
}

// browser starts a headless Chromium with a fresh profile for the test and
// returns a tab's context; the browser is closed, and waited for, by t's
// cleanup.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := findChromium(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Start the browser now, so that a browser that cannot start fails
	// here with its reason.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// domState is what the test reads of the rendered page, all in one
// evaluation so that it comes from one document even while the page
// reloads itself.
type domState struct {
	Ready     string            `json:"ready"`
	States    map[string]string `json:"states"`
	Progress  map[string]string `json:"progress"`
	ProgValue map[string]string `json:"progValue"`
	ProgMax   map[string]string `json:"progMax"`
	Lag       map[string]string `json:"lag"`
	Slowest   map[string]string `json:"slowest"`
	Kinds     map[string]string `json:"kinds"`
	Queues    map[string]string `json:"queues"`
	Refresh   string            `json:"refresh"`
	Text      string            `json:"text"`
}

const readDOM = `(() => {
  const q = (el, s) => el.querySelector(s);
  const txt = (el, s) => { const n = q(el, s); return n ? n.textContent.trim() : ""; };
  const st = {ready: txt(document, "#ready"), states: {}, progress: {}, progValue: {}, progMax: {}, lag: {}, slowest: {}, kinds: {}, queues: {},
    refresh: (q(document, 'meta[http-equiv="refresh"]') || {content: ""}).content, text: document.body.innerText};
  for (const sec of document.querySelectorAll("section.informer")) {
    const name = sec.dataset.informer;
    st.states[name] = (q(sec, ".state") || {dataset: {}}).dataset.state || "";
    st.progress[name] = txt(sec, ".progress-text");
    const bar = q(sec, "progress");
    st.progValue[name] = bar ? String(bar.value) : "";
    st.progMax[name] = bar ? String(bar.max) : "";
    st.lag[name] = txt(sec, ".lag");
    st.slowest[name] = txt(sec, ".slowest-handler");
    st.kinds[name] = txt(sec, ".kind");
  }
  for (const row of document.querySelectorAll("tr.queue")) st.queues[row.dataset.queue] = txt(row, ".depth");
  return st;
})()`

// waitDOM reads the page until cond holds (the page may be reloading
// meanwhile: a failed read is retried), failing the test with the last
// state read if the test's deadline comes first.
func waitDOM(t *testing.T, ctx context.Context, what string, cond func(domState) bool) domState {
	t.Helper()
	var last domState
	var lastErr error
	for {
		st, err := chromedp.Run(ctx, chromedp.Evaluate[domState](readDOM))
		if err == nil {
			last, lastErr = st, nil
			if cond(st) {
				return st
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last read error %v; page text:\n%s", what, ctx.Err(), lastErr, last.Text)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func screenshot(t *testing.T, ctx context.Context, name string) []byte {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	return png
}

// testContext is parent ending at the test's deadline (minus a margin for
// cleanup), or never without one.
func testContext(t *testing.T, parent context.Context) context.Context {
	ctx := parent
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-10*time.Second))
		t.Cleanup(cancel)
	}
	return ctx
}

// TestBrowser drives the page in a real headless Chromium: one informer
// ("orders") held in the middle of its initial list, another ("users")
// synced with a slow handler and a held watch (lag), and a work queue. It
// checks the rendered DOM during and after the initial sync, and the meta
// refresh bringing the sync in without a navigation. The screenshot taken
// during the sync is the README's (docs/status.png, written when
// UPDATE_SCREENSHOT=1).
func TestBrowser(t *testing.T) {
	tab := browser(t)
	srcs := newSources(t)
	page := statuspage.New(statuspage.Options{Title: "orders-service", Refresh: time.Second})
	mux := http.NewServeMux()
	mux.Handle("/debug/informers/", page)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// ctx is the tab's context (chromedp calls) bounded by the deadline.
	ctx := testContext(t, tab)

	// users: synced, a slow handler, a held watch.
	const nUsers = 1200
	for i := range nUsers {
		srcs.putUser(t, fmt.Sprintf("u%04d", i), user{Name: fmt.Sprint("user ", i), Email: "secret-object-value@example.com"})
	}
	usersLW := newPausing[user](srcs.users, -1)
	users := core.NewSharedIndexInformer[user](usersLW, core.InformerOptions[user]{
		Name: "users", Metrics: page, ErrorHandler: page.ErrorHandler("users", nil),
	})
	page.Add(users)
	queue := workqueue.New(workqueue.Options[string]{Name: "welcome-mails", MetricsProvider: page})
	t.Cleanup(queue.ShutDown)
	if _, err := users.AddEventHandlerWithOptions(core.ResourceEventHandlerFuncs[user]{
		AddFunc: func(key string, _ user, _ bool) { queue.Add(key) },
	}, core.HandlerOptions{Name: "enqueue"}); err != nil {
		t.Fatal(err)
	}
	mailer := newBlocker[user]()
	if _, err := users.AddEventHandlerWithOptions(mailer, core.HandlerOptions{Name: "mailer"}); err != nil {
		t.Fatal(err)
	}
	run(t, users)
	t.Cleanup(mailer.Release)
	if err := users.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	// A bucket's informer counts its list's version applied at the
	// watch's first bookmark (driver.SupersededSkipper): the lag below is
	// counted from there.
	if err := users.WaitFor(ctx, users.LastSyncResourceVersion()); err != nil {
		t.Fatal(err)
	}
	release := usersLW.HoldWatch()
	t.Cleanup(release)
	for i := range 7 {
		srcs.putUser(t, fmt.Sprintf("n%d", i), user{Name: "new"})
	}

	// orders: held after 2,500 of 4,000 objects.
	const nOrders = 4000
	for i := range nOrders {
		srcs.putOrder(t, fmt.Sprintf("o%05d", i), user{Name: fmt.Sprint("order ", i)})
	}
	ordersLW := newPausing[user](srcs.orders, 2500)
	t.Cleanup(ordersLW.ReleaseList)
	orders := core.NewSharedIndexInformer[user](ordersLW, core.InformerOptions[user]{Name: "orders", Metrics: page})
	page.Add(orders)
	run(t, orders)
	<-ordersLW.ListPaused()

	// During the sync, without the reloads (refresh=0) so that the
	// screenshot shows one settled document.
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/debug/informers/?refresh=0")); err != nil {
		t.Fatal(err)
	}
	st := waitDOM(t, ctx, "orders syncing at 2,048 of 4,000, users synced with a lag of 7 and mailer slowest", func(st domState) bool {
		return st.States["orders"] == "syncing" && st.ProgValue["orders"] == "2048" &&
			st.States["users"] == "synced" && strings.HasPrefix(st.Lag["users"], "7 versions") && st.Slowest["users"] == "mailer"
	})
	if st.ProgMax["orders"] != "4000" || !strings.Contains(st.Progress["orders"], "initial list: 2,048 of ~4,000 objects (51%)") {
		t.Errorf("orders progress: value %s max %s text %q", st.ProgValue["orders"], st.ProgMax["orders"], st.Progress["orders"])
	}
	if st.Ready != "not ready" || !strings.Contains(st.Text, "orders: listing: 2,048 of ~4,000 objects") {
		t.Errorf("readiness: %q; page:\n%s", st.Ready, st.Text)
	}
	if st.Kinds["users"] != srcs.kind || st.Refresh != "" {
		t.Errorf("kind %q (want %q), refresh %q", st.Kinds["users"], srcs.kind, st.Refresh)
	}
	if _, ok := st.Queues["welcome-mails"]; !ok {
		t.Errorf("queue missing: %v", st.Queues)
	}
	if strings.Contains(st.Text, "secret-object-value") || strings.Contains(st.Text, "user 1") || strings.Contains(st.Text, "order 1") {
		t.Errorf("the page shows object contents:\n%s", st.Text)
	}
	png := screenshot(t, tab, "status-syncing.png")
	if os.Getenv("UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", "status.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("wrote ../docs/status.png")
	}

	// After the sync: the page reloads itself (meta refresh, no
	// JavaScript) and shows it without being navigated again.
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/debug/informers/")); err != nil {
		t.Fatal(err)
	}
	waitDOM(t, ctx, "the meta refresh", func(st domState) bool { return st.Refresh == "1" && st.States["orders"] == "syncing" })
	ordersLW.ReleaseList()
	release()
	mailer.Release()
	st = waitDOM(t, ctx, "orders and users synced and caught up, shown by a reload", func(st domState) bool {
		return st.States["orders"] == "synced" && st.Ready == "ready" && strings.HasPrefix(st.Lag["users"], "0 versions")
	})
	if st.Progress["orders"] != "" {
		t.Errorf("a progress bar after the sync: %q", st.Progress["orders"])
	}
	screenshot(t, tab, "status-synced.png")
	if err := page.Ready(ctx); err != nil {
		t.Errorf("Ready after the sync: %v", err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("deadline")
	}
}
