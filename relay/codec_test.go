package relay_test

import (
	"context"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/relay"
)

type codecItem struct {
	N int `json:"n"`
}

// An informer with checkpoints over a Downstream needs no codec set by
// hand: the Downstream provides its own (driver.CodecProvider), and a
// checkpoint is saved.
func TestDownstreamProvidesCodecToCheckpoints(t *testing.T) {
	nsrv := harness.StartNATS(t)
	ctx := context.Background()
	js := nsrv.JetStream(t)
	if _, err := js.CreateStream(ctx, relay.StreamConfig("K", "k")); err != nil {
		t.Fatal(err)
	}
	down, err := relay.NewDownstream[codecItem](ctx, js, "K", "k", relay.DownstreamOptions[codecItem]{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	inf, errs := informertest.Run(t, down, core.InformerOptions[codecItem]{Name: "ck",
		Checkpoint: &core.CheckpointOptions[codecItem]{Store: store, Interval: -1}})
	if err := inf.Checkpoint(ctx); err != nil {
		t.Fatalf("Checkpoint: %v (reported: %v)", err, errs.All())
	}
}
