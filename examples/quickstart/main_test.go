package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/examples/internal/exampletest"
)

// The README's first command: the whole tour on the embedded server.
func TestQuickstartTour(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out exampletest.Output
	if err := run(ctx, config{bucket: "qs_test", orders: 300}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"started an embedded NATS JetStream server",
		"wrote 300 orders",
		"cache synced: 300 orders at revision 300",
		"(handlers saw 300 initial adds)",
		"index status=open: 100 orders; index customer=c007: 2 orders, first [o00007 o00257]",
		"wrote o00007 status=refunded at revision 301; after WaitFor the cache says status=refunded",
		"handler: updated o00007: paid -> refunded",
		"deleted o00008; after WaitFor(302) the cache has it: false",
		"handler: deleted o00008 (was shipped)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q\n--- output ---\n%s", want, got)
		}
	}
}

// -follow runs until the context ends (Ctrl-C) and then exits cleanly.
func TestQuickstartFollowStopsOnCancel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out exampletest.Output
	done := make(chan error, 1)
	go func() { done <- run(ctx, config{bucket: "qs_follow", orders: 10, follow: true}, &out) }()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), "press Ctrl-C to stop") {
		if time.Now().After(deadline) {
			t.Fatalf("never reached follow mode:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return after cancel")
	}
	if !strings.HasSuffix(out.String(), "stopping\n") {
		t.Fatalf("no clean stop:\n%s", out.String())
	}
}
