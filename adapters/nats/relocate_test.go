package natsinformer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/integration/harness"
)

// A long feed on an R3 stream gets its consumer on the server its client
// is connected to: the server places an R1 consumer on a random replica,
// and openFeed creates it again until it lands there, deleting each one it
// gives up. Placement stays random, so the test asks for most feeds, not
// all: with up to 1+maxRelocations tries, 20 feeds with fewer than 12
// local ones happen with probability ~1e-5; without relocation (one in
// three local) 12 or more happen with probability ~0.004.
func TestFeedMovesConsumerToConnectedServer(t *testing.T) {
	c := harness.StartNATSCluster(t, 3)
	c.WaitReady(t)
	js := c.JetStream(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var st jetstream.Stream
	for {
		var err error
		st, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "PLACE", Subjects: []string{"place.>"}, Replicas: 3})
		var apiErr *jetstream.APIError
		if err == nil {
			break
		}
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10005 || ctx.Err() != nil { // 10005: no suitable peers for placement
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // a peer not yet known to the meta leader
	}
	for range 3 {
		if _, err := js.Publish(ctx, "place.k", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	var r streamReader
	r.init(js, st, "stream PLACE", "place.>", 0, -1, nil)
	r.relocateAt = 1
	for !r.localReplica() {
		// Right after creation a replica can still be catching up.
		if ctx.Err() != nil {
			t.Fatal("the connected server never reported a current replica of the stream")
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := r.info(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// consumers waits for the stream's consumer list to show want
	// consumers and returns what it last showed: on a cluster the list
	// follows creates and deletes a moment later.
	consumers := func(want int) int {
		t.Helper()
		n := -1
		for end := time.Now().Add(10 * time.Second); n != want && time.Now().Before(end); {
			if n >= 0 {
				time.Sleep(20 * time.Millisecond)
			}
			n = 0
			for range st.ListConsumers(ctx).Info() {
				n++
			}
		}
		return n
	}
	local := 0
	for i := range 20 {
		f, err := r.openFeed(ctx, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			t.Fatalf("feed %d: %v", i, err)
		}
		if n := consumers(1); n != 1 {
			t.Errorf("feed %d: the stream has %d consumers, want 1 (the ones given up are deleted)", i, n)
		}
		if r.local(f.info()) {
			local++
		}
		f.close()
	}
	if local < 12 {
		t.Errorf("%d of 20 feeds had their consumer on the connected server, want at least 12", local)
	}
	if n := consumers(0); n != 0 {
		t.Errorf("%d consumers left after every feed closed", n)
	}

	// A short feed keeps the consumer where the server put it.
	r.relocateAt = 4
	if got := r.relocations(&jetstream.ConsumerInfo{NumPending: 3, Cluster: &jetstream.ClusterInfo{Leader: "elsewhere"}}); got != 0 {
		t.Errorf("3 pending, below the threshold 4: %d relocations, want 0", got)
	}
	if got := r.relocations(&jetstream.ConsumerInfo{NumPending: 4, Cluster: &jetstream.ClusterInfo{Leader: "elsewhere"}}); got != maxRelocations {
		t.Errorf("4 pending on another server: %d relocations, want %d", got, maxRelocations)
	}
}
