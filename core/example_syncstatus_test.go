package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
)

// refusing is a source whose server does not answer.
type refusing struct{}

func (refusing) List(context.Context, driver.ListSink[string]) (core.ResourceVersion, error) {
	return 0, errors.New("dial tcp 10.0.0.7:5432: connect: connection refused")
}

func (refusing) Watch(ctx context.Context, _ core.ResourceVersion, _ driver.WatchOptions[string]) error {
	<-ctx.Done()
	return driver.Stopped(ctx)
}

// Why a cache is not synced: the sync status keeps the latest failure, and
// a wait that gives up names it rather than only "context deadline
// exceeded". (A fake clock keeps the durations below exact.)
func ExampleSharedIndexInformer_SyncStatus() {
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	inf := core.NewSharedIndexInformer[string](refusing{}, core.InformerOptions[string]{
		Name:         "users",
		Clock:        fc,
		Backoff:      core.Backoff{Initial: time.Hour, Max: time.Hour},
		ErrorHandler: func(err error) { /* each failure arrives here as it happens */ },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	for inf.SyncStatus().ListFailures.Count == 0 {
		time.Sleep(time.Millisecond)
	}
	fc.Step(2 * time.Second)

	fmt.Println(inf.SyncStatus())
	fmt.Println(core.WaitForCacheSyncTimeout(ctx, time.Nanosecond, inf))
	cancel()
	fmt.Println(<-done)
	// Output:
	// not synced: list: dial tcp 10.0.0.7:5432: connect: connection refused (1 attempt, last 2s ago)
	// dbinformer: initial sync timed out after 1ns: users: cache not synced 2s after start: list: dial tcp 10.0.0.7:5432: connect: connection refused (1 attempt, last 2s ago): context deadline exceeded
	// <nil>
}
