package main

import (
	"fmt"
	"io"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
)

// checkpoints sets up -checkpoint: a directory store, and a permanent slot
// (the server keeps the changes made while the program is down; the
// informers acknowledge only what a saved checkpoint covers). nil without
// -checkpoint.
func checkpoints(cfg config, opts *pginformer.Options) (checkpoint.Store, error) {
	if cfg.checkpoint == "" {
		return nil, nil
	}
	store, err := checkpoint.NewDirStore(cfg.checkpoint)
	if err != nil {
		return nil, err
	}
	opts.PermanentSlot, opts.Slot = true, cfg.slot
	return store, nil
}

// checkpointFor is an informer's checkpoint option: saved every 10s and
// when the program stops.
func checkpointFor[T any](store checkpoint.Store) *core.CheckpointOptions[T] {
	if store == nil {
		return nil
	}
	return &core.CheckpointOptions[T]{Store: store, Interval: 10 * time.Second}
}

// printWarm says, for each informer, whether it started from a checkpoint.
func printWarm(out io.Writer, nameA string, a core.SyncStatus, nameB string, b core.SyncStatus) {
	for _, x := range []struct {
		name string
		st   core.SyncStatus
	}{{nameA, a}, {nameB, b}} {
		if x.st.Checkpoint > 0 {
			fmt.Fprintf(out, "%s: warm start from the checkpoint at version %d\n", x.name, x.st.Checkpoint)
		}
	}
}
