package statuspage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/statuspage"
)

// A divergence the audit found and healed shows on the page as a row
// naming the keys and counts, never a value; the next run shows equal.
func TestAuditRow(t *testing.T) {
	src := memory.New[user](memory.Options{})
	src.Put("a", user{Name: "a", Email: "a@example.com"})
	lossy := informertest.NewLossy[user](src, informertest.LossyOptions[user]{})
	page := statuspage.New(statuspage.Options{})
	inf := core.NewSharedIndexInformer[user](lossy, core.InformerOptions[user]{
		Name:    "users",
		Metrics: page,
		Audit:   &core.AuditOptions[user]{Period: time.Hour},
	})
	page.Add(inf)
	run(t, inf)
	ctx := context.Background()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if is := snapshotOf(t, page, "users"); is.Audit != nil {
		t.Fatalf("audit before any run: %+v", is.Audit)
	}
	_, html := get(t, page, "/debug/informers/")
	if !strings.Contains(html, "none run") {
		t.Errorf("the page does not say no audit ran:\n%s", html)
	}
	lossy.Arm(informertest.LossDrop)
	rv := src.Put("token=hunter2", user{Name: "b", Email: "secret@example.com"})
	if err := inf.WaitFor(ctx, rv); err != nil {
		t.Fatal(err)
	}
	if r := inf.AuditNow(ctx); r.Missing != 1 || r.Healed != 1 {
		t.Fatalf("audit after a dropped add: %v", r)
	}
	is := snapshotOf(t, page, "users")
	a := is.Audit
	if a == nil || a.Outcome != "divergent" || a.Missing != 1 || a.Healed != 1 || a.Runs != 1 || a.Divergent != 1 || a.Rows != 2 {
		t.Fatalf("audit row after a healed divergence: %+v", a)
	}
	_, html = get(t, page, "/debug/informers/")
	if !strings.Contains(html, "1 missing [token=REDACTED") || !strings.Contains(html, `class="audit-outcome err">divergent`) {
		t.Errorf("the page does not show the divergence with the key redacted:\n%s", html)
	}
	for _, leak := range []string{"hunter2", "secret@example.com"} {
		if strings.Contains(html, leak) {
			t.Errorf("the page shows %q", leak)
		}
	}
	if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual {
		t.Fatalf("audit after healing: %v", r)
	}
	if a := snapshotOf(t, page, "users").Audit; a.Outcome != "equal" || a.Runs != 2 || a.Divergent != 1 {
		t.Errorf("audit row after an equal run: %+v", a)
	}
}
