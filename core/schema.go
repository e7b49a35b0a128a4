package core

import (
	"errors"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core/driver"
)

// SchemaMetrics is implemented by InformerMetrics that count schema
// changes (metrics/prometheus: dbinformer_informer_schema_changes_total).
type SchemaMetrics interface {
	SchemaChanged(action string)
}

// SchemaChanges is what an informer's source reported of its schema
// changes (SyncStatus.SchemaChanges).
type SchemaChanges struct {
	// Count is how many reached the informer since it was created.
	Count int64
	// Last is the latest, reported at LastAt: its message names the
	// table, the column, the change, what was done and the fix.
	Last   driver.SchemaChange
	LastAt time.Time
}

// lastSchema keeps an informer's schema changes for SyncStatus.
type lastSchema struct {
	mu sync.Mutex
	s  SchemaChanges
}

// note records err if it is a schema change, and reports whether it was.
func (l *lastSchema) note(err error, now time.Time) (driver.SchemaChange, bool) {
	var sc driver.SchemaChange
	if !errors.As(err, &sc) {
		return nil, false
	}
	l.mu.Lock()
	l.s.Count++
	l.s.Last, l.s.LastAt = sc, now
	l.mu.Unlock()
	return sc, true
}

func (l *lastSchema) get() *SchemaChanges {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s.Count == 0 {
		return nil
	}
	s := l.s
	return &s
}

// SchemaChanged passes a schema change to every provider's metrics that
// count them.
func (t teeMetrics) SchemaChanged(action string) {
	for _, m := range t {
		if s, ok := m.(SchemaMetrics); ok {
			s.SchemaChanged(action)
		}
	}
}
