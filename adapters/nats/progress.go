package natsinformer

import (
	"time"

	"github.com/dbinformer/dbinformer/core"
)

var (
	_ core.ProgressIntervaler = (*KV[int])(nil)
	_ core.ProgressIntervaler = (*EventStream[int])(nil)
)

// ProgressInterval implements core.ProgressIntervaler with IdleCheck
// (KVOptions, EventStreamOptions): an idle watch answers a bookmark
// request by reading the stream's head, so the informer asks for one after
// each IdleCheck without messages and reopens a watch that answers none
// for core.StuckIntervals of them (a frozen server, a consumer that stopped
// delivering). A negative IdleCheck turns that off too.
func (r *streamReader) ProgressInterval() time.Duration { return max(r.idle, 0) }
