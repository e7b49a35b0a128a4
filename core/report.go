package core

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
)

// reporter is the one error path of an informer and its reflector: the
// user's ErrorHandler when set, else the logger, at Info for an expired
// version (an ordinary relist), at Warn for a stuck watch (reopened) and at
// Error for everything else.
type reporter struct {
	name    string
	handler func(error)
	logger  *slog.Logger
	decode  *lastDecode // the last *DecodeError reported, for SyncStatus
	schema  *lastSchema // the schema changes reported, for SyncStatus
	// schemaMet counts schema changes (the informer's metrics, when they
	// implement SchemaMetrics); nil when they do not.
	schemaMet SchemaMetrics
	// seen counts the errors reported, for the warm start's log line.
	seen *reportsSeen
}

// reportsSeen is how many errors an informer reported, and the last one:
// a warm start's log line names those reported while it waited (a
// restart slower than usual says why: a slot held by the walsender of a
// process that died, a server that refused connections).
type reportsSeen struct {
	mu   sync.Mutex
	n    int64
	last error
}

// reported returns how many errors were reported so far, and the last.
func (r reporter) reported() (int64, error) {
	if r.seen == nil {
		return 0, nil
	}
	r.seen.mu.Lock()
	defer r.seen.mu.Unlock()
	return r.seen.n, r.seen.last
}

// lastDecode is the last *driver.DecodeError an informer reported and when.
type lastDecode struct {
	clk clock.Clock
	mu  sync.Mutex
	err *driver.DecodeError
	at  time.Time
}

func newReporter(name string, handler func(error), logger *slog.Logger, clk clock.Clock) reporter {
	if logger == nil {
		logger = slog.Default()
	}
	return reporter{name: name, handler: handler, logger: logger, decode: &lastDecode{clk: clock.Or(clk)}, schema: &lastSchema{}, seen: &reportsSeen{}}
}

// lastDecodeError returns the last *driver.DecodeError reported and when; nil
// when there was none.
func (r reporter) lastDecodeError() (*driver.DecodeError, time.Time) {
	if r.decode == nil {
		return nil, time.Time{}
	}
	r.decode.mu.Lock()
	defer r.decode.mu.Unlock()
	return r.decode.err, r.decode.at
}

func (r reporter) report(ctx context.Context, err error) {
	if r.seen != nil {
		r.seen.mu.Lock()
		r.seen.n++
		r.seen.last = err
		r.seen.mu.Unlock()
	}
	var de *driver.DecodeError
	if r.decode != nil && errors.As(err, &de) {
		now := r.decode.clk.Now()
		r.decode.mu.Lock()
		r.decode.err, r.decode.at = de, now
		r.decode.mu.Unlock()
	}
	if r.schema != nil {
		if sc, ok := r.schema.note(err, r.decode.clk.Now()); ok && r.schemaMet != nil {
			r.schemaMet.SchemaChanged(sc.SchemaAction())
		}
	}
	if r.handler != nil {
		r.handler(err)
		return
	}
	level := slog.LevelError
	switch {
	case errors.Is(err, driver.ErrExpired):
		level = slog.LevelInfo
	case errors.Is(err, driver.ErrWatchStuck):
		level = slog.LevelWarn
	}
	r.logger.Log(ctx, level, "dbinformer", "source", r.name, "err", err)
}
