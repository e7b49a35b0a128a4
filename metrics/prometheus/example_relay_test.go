package prommetrics_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbinformer/dbinformer/core"
	prommetrics "github.com/dbinformer/dbinformer/metrics/prometheus"
)

// fixedRelay stands in for a *relay.Relay[T] (which needs a JetStream
// stream and a source): the provider reads any relay through its Name and
// RelayStatus.
type fixedRelay struct{ st core.RelayStatus }

func (fixedRelay) Name() string                                   { return "users-relay" }
func (r fixedRelay) RelayStatus(context.Context) core.RelayStatus { return r.st }

// A relay's state as Prometheus metrics, read at scrape time. With a real
// relay: pm.TrackRelay(r) for the r that relay.New returned.
func ExampleProvider_TrackRelay() {
	reg := prometheus.NewRegistry()
	pm, err := prommetrics.New(reg, prommetrics.Options{})
	if err != nil {
		panic(err)
	}
	pm.TrackRelay(fixedRelay{core.RelayStatus{Leading: true, Epoch: 7, Terms: 1, Published: 1200, Stored: 5000,
		StreamEpoch: 7, StreamSequence: 1200, StreamVersion: 5000, Head: 5120, HasHead: true}})
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "dbinformer_relay_leading", "dbinformer_relay_epoch", "dbinformer_relay_lag", "dbinformer_relay_stream_resource_version":
			m := mf.GetMetric()[0]
			fmt.Println(mf.GetName(), m.GetGauge().GetValue())
		}
	}
	// Output:
	// dbinformer_relay_epoch 7
	// dbinformer_relay_lag 120
	// dbinformer_relay_leading 1
	// dbinformer_relay_stream_resource_version 5000
}
