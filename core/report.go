package core

import (
	"context"
	"errors"
	"log/slog"
)

// reporter is the one error path of an informer and its reflector: the
// user's ErrorHandler when set, else the logger, at Info for an expired
// version (an ordinary relist), at Warn for a stuck watch (reopened) and at
// Error for everything else.
type reporter struct {
	name    string
	handler func(error)
	logger  *slog.Logger
}

func newReporter(name string, handler func(error), logger *slog.Logger) reporter {
	if logger == nil {
		logger = slog.Default()
	}
	return reporter{name: name, handler: handler, logger: logger}
}

func (r reporter) report(ctx context.Context, err error) {
	if r.handler != nil {
		r.handler(err)
		return
	}
	level := slog.LevelError
	switch {
	case errors.Is(err, ErrExpired):
		level = slog.LevelInfo
	case errors.Is(err, ErrWatchStuck):
		level = slog.LevelWarn
	}
	r.logger.Log(ctx, level, "dbinformer", "source", r.name, "err", err)
}
