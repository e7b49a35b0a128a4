package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/integration/harness"
)

// TestDelegates checks that the API kept here reaches the launchers in
// internal/testkit/servers: a server started through it serves writes,
// and the handle is the same type the adapters' test kits take.
func TestDelegates(t *testing.T) {
	srv := harness.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put, err := srv.Client(t).Put(ctx, "/delegates/a", "1")
	if err != nil {
		t.Fatalf("put through a harness-started etcd: %v", err)
	}
	if head := srv.Head(t); head != put.Header.Revision {
		t.Fatalf("Head = %d, want the put's revision %d", head, put.Header.Revision)
	}
	if !srv.Running() {
		t.Fatal("Running = false for a started server")
	}
}
