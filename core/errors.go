package core

import (
	"errors"
	"fmt"
)

// OrderError reports a watch that broke its contract by delivering a
// version not after the last one applied. The batch is not applied, and
// the reflector relists: resuming the watch from the last applied version
// would skip the change that came late (it is below that version), and a
// stream that broke its order once cannot be trusted to have lost nothing
// else.
type OrderError struct {
	Source string
	Key    string
	RV     ResourceVersion
	After  ResourceVersion
}

func (e *OrderError) Error() string {
	return fmt.Sprintf("%s: key %q at version %d arrived after version %d: watch out of order, relisting", e.Source, e.Key, e.RV, e.After)
}

// errNoKey reports an adapter event without a key: it cannot be cached.
var errNoKey = errors.New("event has no key")

// ErrProgressNotSupported is returned by RequestProgress when no watch is
// open or the driver.ListerWatcher cannot produce bookmarks on request.
var ErrProgressNotSupported = errors.New("dbinformer: the current watch cannot report progress on request")

// errWatchTimeout is the cause with which the reflector ends a watch at
// its planned timeout.
var errWatchTimeout = errors.New("dbinformer: planned watch timeout")
