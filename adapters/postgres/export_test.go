package pginformer

import (
	"slices"
	"sort"
)

// StreamedColumns returns, sorted, the columns of every row layout the
// stream sent for t's table (pgoutput's Relation messages): the layouts
// t's decode plans are cached for. Snapshot layouts are not cached.
func StreamedColumns[T any](t *Table[T]) []string {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	var out []string
	for rel := range t.m.plans {
		for _, n := range rel.Names {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// KeptToast returns how many keys and bytes t's TOAST memory (toast.go)
// holds.
func KeptToast[T any](t *Table[T]) (keys, bytes int) {
	t.st.knownMu.Lock()
	defer t.st.knownMu.Unlock()
	seen := map[string]bool{}
	for _, m := range t.st.vals {
		for k, data := range m {
			seen[k] = true
			bytes += len(data)
		}
	}
	return len(seen), bytes
}

// StreamPosition returns the position s's replication stream delivered
// up to (the fan-out's), and whether the stream runs.
func StreamPosition(s *Source) (pos uint64, streaming bool) {
	s.mu.Lock()
	streaming = s.sess != nil && s.sess.streaming
	s.mu.Unlock()
	return uint64(s.fan.position()), streaming
}
