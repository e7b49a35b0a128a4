package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The demo starts processes of its own binary with -role: in the test
// that binary is the test's, which then acts as that process.
func TestMain(m *testing.M) {
	if slices.Contains(os.Args[1:], "-role") {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// go run ./examples/relay -status 127.0.0.1:0 on the embedded servers:
// each downstream process reads the write whose commit token it was given
// over HTTP, of either table, both relayed under one election from one
// slot; the relay process's status page and /metrics show both relays
// leading, with what they published.
func TestRelayExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, "", "", 1, "127.0.0.1:0", &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{`downstream-1 read items after WaitFor(`, `{"id":"answer","value":21}`, `downstream-2 read tags after WaitFor(`, `{"id":"answer","value":42}`,
		"relay ITEMS: leader, epoch ", "relay TAGS: leader, epoch ",
		`metric dbinformer_relay_published_messages_total{relay="ITEMS"} `, `metric dbinformer_relay_published_messages_total{relay="TAGS"} `} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
