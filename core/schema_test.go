package core

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

// testSchemaChange is an adapter's schema change error: relist or fail.
type testSchemaChange struct{ fail bool }

func (e testSchemaChange) Error() string {
	return fmt.Sprintf("table t: column %q dropped (fail=%v)", "plan", e.fail)
}
func (e testSchemaChange) Unwrap() error {
	if e.fail {
		return driver.ErrPermanent
	}
	return driver.ErrExpired
}
func (e testSchemaChange) SchemaAction() string {
	if e.fail {
		return "fail"
	}
	return "relist"
}

type schemaCounter struct {
	NoopMetrics
	mu      sync.Mutex
	actions []string
}

func (c *schemaCounter) InformerMetrics(string) InformerMetrics { return c }
func (c *schemaCounter) SchemaChanged(action string) {
	c.mu.Lock()
	c.actions = append(c.actions, action)
	c.mu.Unlock()
}
func (c *schemaCounter) got() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.actions, ",")
}

// A watch that ends on a schema change: SyncStatus keeps the last one and
// how many came, and the metrics (through MultiMetrics too) count each
// with what was done; the relist then goes on as for any expiry, and a
// change that fails stops the informer.
func TestSchemaChangesReachSyncStatusAndMetrics(t *testing.T) {
	lw := newFakeLW()
	m1, m2 := &schemaCounter{}, &schemaCounter{}
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{Metrics: MultiMetrics(m1, m2)})
	done := make(chan error, 1)
	go func() { done <- inf.Run(testCtx(t)) }()
	if st := inf.SyncStatus(); st.SchemaChanges != nil {
		t.Fatalf("schema changes before any: %+v", st.SchemaChanges)
	}
	lw.list(t, 1, driver.Event[string]{Type: driver.Added, Key: "a", Object: "1", HasObject: true, RV: 1})
	w0 := lw.watch(t)
	w0.send(t, driver.Event[string]{Type: driver.Modified, Key: "a", Object: "2", HasObject: true, RV: 2}) // progress: the relist comes at once
	w0.fail(t, testSchemaChange{})
	lw.list(t, 3, driver.Event[string]{Type: driver.Added, Key: "a", Object: "3", HasObject: true, RV: 3})
	w := lw.watch(t)
	st := inf.SyncStatus()
	if sc := st.SchemaChanges; sc == nil || sc.Count != 1 || sc.Last.SchemaAction() != "relist" || sc.LastAt.IsZero() || !strings.Contains(sc.Last.Error(), `column "plan" dropped`) {
		t.Fatalf("SyncStatus.SchemaChanges after a relisting change: %+v", sc)
	}
	w.fail(t, testSchemaChange{fail: true})
	if err := <-done; !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("Run: %v, want the failing schema change", err)
	}
	if sc := inf.SyncStatus().SchemaChanges; sc == nil || sc.Count != 2 || sc.Last.SchemaAction() != "fail" {
		t.Fatalf("SyncStatus.SchemaChanges after a failing change: %+v", sc)
	}
	for _, m := range []*schemaCounter{m1, m2} {
		if got := m.got(); got != "relist,fail" {
			t.Errorf("metrics counted %q, want relist,fail", got)
		}
	}
}
