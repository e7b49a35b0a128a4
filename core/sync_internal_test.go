package core

import (
	"context"
	"testing"
	"time"
)

// A WaitForCacheSync already waiting returns when the informer syncs on a
// condition no queue change reports: a warm start reaches the head it read
// with nothing left to apply, and the follower that notices it (followQueue)
// acts on a kick from before the wait began. Until then the waiter slept
// to the next change of the queue: over etcd the next progress
// notification, about a second (seen in TestKillRestart's restart times).
func TestWaitForCacheSyncWakesOnSyncWithoutQueueChange(t *testing.T) {
	i := NewSharedIndexInformer[string](newFakeLW(), InformerOptions[string]{Name: "x"})
	ws := &warmState{began: time.Now()}
	i.warm.Store(ws) // target not read yet: not synced
	if err := i.queue.Replace(context.Background(), func(func(Delta[string]) error) (ResourceVersion, error) { return 7, nil }); err != nil {
		t.Fatal(err)
	}
	if !i.queue.HasSynced() || i.checkSynced() {
		t.Fatal("set-up: want the queue synced and the warm start not")
	}
	waited := make(chan error, 1)
	go func() { waited <- i.WaitForCacheSync(context.Background()) }()
	// Let the waiter take its Changed channel and find the informer not
	// synced, then sync the way followQueue does, with no queue change.
	for !i.queue.(interface{ changedIsTaken() bool }).changedIsTaken() {
		time.Sleep(time.Millisecond)
	}
	ws.reach(i.queue.AppliedVersion())
	if !i.checkSynced() {
		t.Fatal("not synced after the warm start reached its head")
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a hang, not a speed target
		t.Fatal("WaitForCacheSync still waiting after the informer synced")
	}
}

// changedIsTaken reports whether a waiter holds the Changed channel.
func (q *queueBase) changedIsTaken() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.changedTaken
}
