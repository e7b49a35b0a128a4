package reliability

import (
	"fmt"
	"maps"
	"slices"
	"sync"
)

// History records, per key, the versions one handler saw, and reports a
// key whose version went backwards. It is safe for concurrent use.
type History struct {
	mu         sync.Mutex
	last       map[string]int64 // highest version seen, kept across deletes
	live       map[string]int64 // the handler's view: key -> version, deleted keys absent
	events     int
	violations []string
}

// NewHistory returns an empty History.
func NewHistory() *History {
	return &History{last: map[string]int64{}, live: map[string]int64{}}
}

// Saw records an add or update of key at version ver. The same version
// again is allowed (a resync, a relist of an unchanged key, a write the
// workload retried); a smaller one is a violation.
func (h *History) Saw(key string, ver int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events++
	if last, ok := h.last[key]; ok && ver < last {
		h.violations = append(h.violations, fmt.Sprintf("key %q went backwards: saw version %d after %d", key, ver, last))
	}
	if ver > h.last[key] {
		h.last[key] = ver
	}
	h.live[key] = ver
}

// Deleted records a delete of key; ver is the version of the object the
// delete carried (the last known state), which may be older than the newest
// the handler saw only if the delete came from a relist (finalStateUnknown)
// and the cache lagged, never newer than anything the source wrote.
func (h *History) Deleted(key string, ver int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events++
	if _, ok := h.live[key]; !ok {
		h.violations = append(h.violations, fmt.Sprintf("key %q deleted while the handler did not hold it (version %d)", key, ver))
	}
	delete(h.live, key)
}

// Events returns how many adds, updates and deletes were recorded.
func (h *History) Events() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.events
}

// Violations returns every backwards step recorded so far.
func (h *History) Violations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.violations)
}

// Diff compares the handler's view with want (key -> version) and returns
// one line per difference, sorted; nil when they are equal.
func (h *History) Diff(want map[string]int64) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Diff("handler", h.live, want)
}

// Diff returns one line per key where got and want differ, sorted by key.
func Diff(what string, got, want map[string]int64) []string {
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case gok && !wok:
			out = append(out, fmt.Sprintf("%s holds %q at version %d; the source deleted it", what, k, g))
		case !gok && wok:
			out = append(out, fmt.Sprintf("%s lacks %q; the source has version %d", what, k, w))
		case g != w:
			out = append(out, fmt.Sprintf("%s holds %q at version %d; the source has version %d", what, k, g, w))
		}
	}
	return out
}
