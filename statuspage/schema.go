package statuspage

import (
	"time"

	"github.com/dbinformer/dbinformer/core"
)

// SchemaChangeStatus is what the page shows of an informer's schema
// changes (core.SyncStatus.SchemaChanges): how many, and the last one with
// what was done about it.
type SchemaChangeStatus struct {
	Count int64     `json:"count"`
	At    time.Time `json:"at"`
	// Action is "relist" (the informer listed again) or "fail" (it
	// stopped); Last is the change in one line, through Redact.
	Action string `json:"action"`
	Last   string `json:"last"`
}

// schemaChangeStatus is the page's view; nil when there was none.
func schemaChangeStatus(sc *core.SchemaChanges) *SchemaChangeStatus {
	if sc == nil {
		return nil
	}
	return &SchemaChangeStatus{Count: sc.Count, At: sc.LastAt, Action: sc.Last.SchemaAction(), Last: clip(Redact(sc.Last.Error()), maxMessage)}
}
