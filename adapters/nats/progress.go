package natsinformer

import (
	"time"

	"github.com/dbinformer/dbinformer/core/driver"
)

var (
	_ driver.ProgressIntervaler = (*KV[int])(nil)
	_ driver.ProgressIntervaler = (*EventStream[int])(nil)
)

// ProgressInterval implements driver.ProgressIntervaler with IdleCheck
// (KVOptions, EventStreamOptions): an idle watch answers a bookmark
// request by reading the stream's head, so the informer asks for one after
// each IdleCheck without messages and reopens a watch that answers none
// for driver.StuckIntervals of them (a frozen server, a consumer that stopped
// delivering). A negative IdleCheck turns that off too.
func (r *streamReader) ProgressInterval() time.Duration { return max(r.idle, 0) }
