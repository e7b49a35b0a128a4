package core

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
)

// checkpointer is an informer's checkpoint state (InformerOptions.Checkpoint).
type checkpointer[T any] struct {
	opts  CheckpointOptions[T]
	name  string
	codec codec.Codec[T]
	ack   driver.DurableAcknowledger // nil when the source acknowledges nothing
	// rec records each change the cache applies (handleDeltas), so that
	// a save knows which objects it read in a state later than its
	// version.
	rec *changeRecord

	mu    sync.Mutex // one save at a time
	saved ResourceVersion
	wrote bool

	// What SyncStatus.Checkpoints shows, under statMu (a status read must
	// not wait for a save).
	statMu    sync.Mutex
	savedAt   time.Time
	lastErr   error
	lastErrAt time.Time
}

// note records a save's or a load's outcome for CheckpointStatus.
func (c *checkpointer[T]) note(now time.Time, saved bool, err error) {
	c.statMu.Lock()
	defer c.statMu.Unlock()
	if saved {
		c.savedAt, c.lastErr, c.lastErrAt = now, nil, time.Time{}
	}
	if err != nil {
		c.lastErr, c.lastErrAt = err, now
	}
}

// setupCheckpoint checks the checkpoint options at Run.
func (i *SharedIndexInformer[T]) setupCheckpoint() error {
	o := i.opts.Checkpoint
	if o == nil || i.ckpt != nil {
		return nil
	}
	if o.Store == nil {
		return fmt.Errorf("%s: InformerOptions.Checkpoint.Store is nil (use checkpoint.NewDirStore(dir))", i.name)
	}
	c := &checkpointer[T]{opts: *o, name: o.Name, codec: o.Codec, rec: newChangeRecord()}
	if c.name == "" {
		c.name = i.name
	}
	if err := checkpoint.CheckName(c.name); err != nil {
		return err
	}
	if c.codec == nil {
		if p, ok := driver.Capability[driver.CodecProvider[T]](i.lw); ok {
			c.codec = p.Codec()
		}
	}
	if c.codec == nil {
		return fmt.Errorf("%s: checkpoints need a codec and the source does not provide one: set InformerOptions.Checkpoint.Codec (core.JSON[T]{} for JSON)", i.name)
	}
	if a, ok := driver.Capability[driver.DurableAcknowledger](i.lw); ok {
		c.ack = a
		a.GateAcknowledgements(true)
	}
	if i.opts.Equal == nil {
		i.opts.Equal = codecEqual(c.codec)
	}
	i.ckpt = c
	i.ckptRec.Store(c.rec)
	return nil
}

// checkpointLoop saves checkpoints every Interval until ctx ends.
func (i *SharedIndexInformer[T]) checkpointLoop(ctx context.Context, c *checkpointer[T]) {
	every := c.opts.Interval
	if every == 0 {
		every = time.Minute
	}
	if every < 0 {
		return
	}
	t := i.clk.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := i.saveCheckpoint(ctx, c); err != nil && ctx.Err() == nil {
			i.rep.report(ctx, err)
		}
		t.Reset(every)
	}
}

// finalCheckpoint saves the checkpoint of a run that ended.
func (i *SharedIndexInformer[T]) finalCheckpoint(ctx context.Context, c *checkpointer[T]) {
	if c == nil {
		return
	}
	if err := i.saveCheckpoint(context.WithoutCancel(ctx), c); err != nil {
		i.rep.report(ctx, err)
	}
}
