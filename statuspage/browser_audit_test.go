package statuspage_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/statuspage"
)

// TestBrowserAudit renders, in a real headless Chromium, an informer whose
// source lied (a dropped add, a dropped delete and an altered update) and
// whose audit then found and healed the three keys: the Audit row shows
// the divergence with the keys (redacted where they hold secrets), never a
// value, and the healed count. The screenshot is the README's
// (docs/audit.png, written when UPDATE_SCREENSHOT=1).
func TestBrowserAudit(t *testing.T) {
	tab := browser(t)
	src := memory.New[user](memory.Options{})
	for i := range 40 {
		src.Put(fmt.Sprintf("user-%02d", i), user{Name: fmt.Sprint("user ", i), Email: "secret-object-value@example.com"})
	}
	lossy := informertest.NewLossy[user](src, informertest.LossyOptions[user]{Alter: func(u user) user { u.Name += " (altered)"; return u }})
	page := statuspage.New(statuspage.Options{Title: "orders-service"})
	inf := core.NewSharedIndexInformer[user](lossy, core.InformerOptions[user]{
		Name: "users", Metrics: page,
		Audit: &core.AuditOptions[user]{Period: time.Hour},
	})
	page.Add(inf)
	run(t, inf)
	ctx := testContext(t, context.Background())
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual {
		t.Fatalf("audit after the sync: %v", r)
	}
	lie := func(k informertest.LossKind, write func() core.ResourceVersion) {
		t.Helper()
		lossy.Arm(k)
		if err := inf.WaitFor(ctx, write()); err != nil {
			t.Fatal(err)
		}
	}
	lie(informertest.LossDrop, func() core.ResourceVersion {
		return src.Put("user-40", user{Name: "user 40", Email: "secret-object-value@example.com"})
	})
	lie(informertest.LossDrop, func() core.ResourceVersion { rv, _ := src.Delete("user-07"); return rv })
	lie(informertest.LossAlter, func() core.ResourceVersion {
		return src.Put("token=hunter2", user{Name: "api", Email: "secret-object-value@example.com"})
	})
	r := inf.AuditNow(ctx)
	if r.Outcome != core.AuditDivergent || r.Divergent() != 3 || r.Healed != 3 {
		t.Fatalf("audit after three lies: %v", r)
	}

	mux := http.NewServeMux()
	mux.Handle("/debug/informers/", page)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tctx := testContext(t, tab)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/debug/informers/?refresh=0")); err != nil {
		t.Fatal(err)
	}
	st := waitDOM(t, tctx, "the audit row", func(st domState) bool { return strings.Contains(st.Text, "divergent") })
	for _, want := range []string{"1 missing [user-40]", "1 extra [user-07]", "1 differing [token=REDACTED", "3 healed", "1 divergent"} {
		if !strings.Contains(st.Text, want) {
			t.Errorf("the rendered page does not say %q:\n%s", want, st.Text)
		}
	}
	for _, leak := range []string{"hunter2", "secret-object-value"} {
		if strings.Contains(st.Text, leak) {
			t.Errorf("the rendered page shows %q", leak)
		}
	}
	png := screenshot(t, tctx, "audit.png")
	if os.Getenv("UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", "audit.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("wrote ../docs/audit.png")
	}
}
