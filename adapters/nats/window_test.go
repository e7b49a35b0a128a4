package natsinformer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/integration/harness"
)

// A feed's window follows the stream's average message size as the last
// stream info read showed it: small values get the largest window, large
// ones a window that keeps two of them far below nats.go's 64 MiB pending
// limit; a BatchSize set in the options wins.
func TestFeedWindowFollowsMessageSize(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	window := func(name string, size, count, batch int) int {
		t.Helper()
		st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range count {
			if _, err := js.Publish(ctx, name+".k", []byte(strings.Repeat("x", size))); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		var r streamReader
		r.init(js, st, name, name+".>", batch, -1, nil)
		if _, err := r.info(ctx); err != nil {
			t.Fatal(err)
		}
		return r.window()
	}
	if got := window("EMPTY", 0, 0, 0); got != 1024 {
		t.Errorf("empty stream: window %d, want 1024", got)
	}
	if got := window("SMALL", 100, 50, 0); got != maxWindow {
		t.Errorf("100-byte messages: window %d, want %d", got, maxWindow)
	}
	got := window("LARGE", 256<<10, 20, 0)
	if got < minWindow || 2*got*(256<<10) > 64<<20 {
		t.Errorf("256 KiB messages: window %d; two windows must stay under 64 MiB and it must be at least %d", got, minWindow)
	}
	if got := window("SET", 100, 5, 300); got != 300 {
		t.Errorf("BatchSize 300: window %d", got)
	}
}
