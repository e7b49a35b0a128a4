package shardtest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/shard/shardtest"
)

// recordingTB keeps the errors Check reports instead of failing the test.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Helper()             {}
func (r *recordingTB) Logf(string, ...any) {}
func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// Check finds two replicas working on one key at overlapping times, and
// only that: one replica's overlapping calls, and calls in turn, are fine.
func TestCallLogCheck(t *testing.T) {
	at := time.Date(2026, 12, 7, 15, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	var log shardtest.CallLog
	log.Add(shardtest.Call{Key: "a", Replica: "r1", Term: 1, Start: ms(0), End: ms(10)})
	log.Add(shardtest.Call{Key: "a", Replica: "r1", Term: 1, Start: ms(5), End: ms(20)})  // same replica
	log.Add(shardtest.Call{Key: "a", Replica: "r2", Term: 2, Start: ms(20), End: ms(30)}) // in turn
	log.Add(shardtest.Call{Key: "b", Replica: "r1", Term: 1, Start: ms(0), End: ms(10)})
	log.Add(shardtest.Call{Key: "b", Replica: "r2", Term: 2, Start: ms(9), End: ms(12)}) // overlap
	rec := &recordingTB{TB: t}
	calls, shared, overlaps := log.Check(rec)
	if calls != 5 || shared != 2 || overlaps != 1 || len(rec.errs) != 1 {
		t.Fatalf("Check: %d calls, %d shared, %d overlaps, errors %q; want 5, 2, 1 and one error", calls, shared, overlaps, rec.errs)
	}
}
