package core

import (
	"fmt"

	"github.com/dbinformer/dbinformer/core/driver"
)

// errAuditRelist ends the watch when an audit with HealRelist found a
// difference: it matches driver.ErrExpired, so the reflector relists.
var errAuditRelist = fmt.Errorf("the consistency audit found the cache different from the source and asked for a relist (AuditOptions.Heal is HealRelist): %w", driver.ErrExpired)

// openWatch registers the watch's cancel function for requestRelist and
// returns what unregisters it. A relist asked for between watches ends the
// new one at once.
func (r *Reflector[T]) openWatch(cancel func(error)) (stop func()) {
	r.mu.Lock()
	r.cancelWatch = cancel
	r.mu.Unlock()
	if r.relistReq.Swap(false) {
		cancel(errAuditRelist)
	}
	return func() {
		r.mu.Lock()
		r.cancelWatch = nil
		r.mu.Unlock()
	}
}

// requestRelist ends the open watch (or the next one) so that the
// reflector relists.
func (r *Reflector[T]) requestRelist() {
	r.relistReq.Store(true)
	r.mu.Lock()
	c := r.cancelWatch
	r.mu.Unlock()
	if c != nil && r.relistReq.Swap(false) {
		c(errAuditRelist)
	}
}
