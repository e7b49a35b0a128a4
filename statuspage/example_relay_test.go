package statuspage_test

import (
	"context"
	"fmt"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/statuspage"
)

// fixedRelay stands in for a *relay.Relay[T] (which needs a JetStream
// stream and a source): the page reads any relay through its Name and
// RelayStatus.
type fixedRelay struct{ st core.RelayStatus }

func (fixedRelay) Name() string                                   { return "users-relay" }
func (r fixedRelay) RelayStatus(context.Context) core.RelayStatus { return r.st }

// A relay on the page beside the informers: leader or follower, its term,
// the stream's last version, the source's head and the lag. With a real
// relay: page.AddRelay(r) for the r that relay.New returned.
func ExamplePage_AddRelay() {
	page := statuspage.New(statuspage.Options{Title: "relay"})
	page.AddRelay(fixedRelay{core.RelayStatus{Leading: true, Epoch: 7, Terms: 1, Published: 1200, Stored: 5000,
		StreamEpoch: 7, StreamSequence: 1200, StreamVersion: 5000, Head: 5120, HasHead: true}})
	r := page.Snapshot(context.Background()).Relays[0]
	fmt.Printf("%s: %s of term %d, stream at %d, source at %d, lag %d\n", r.Name, r.Role, r.Epoch, r.StreamVersion, r.Head, *r.LagVersions)
	// Output:
	// users-relay: leader of term 7, stream at 5000, source at 5120, lag 120
}
