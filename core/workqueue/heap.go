package workqueue

// waitEntry is one pending AddAfter. Like ready-queue slots, an entry only
// counts while seq is its item's current wait seq: moving an item's ready
// time earlier pushes a new entry instead of fixing the old one in place,
// which would need a per-item heap index updated on every swap.
type waitEntry struct {
	at    int64 // ready time, in nanoseconds since the queue's epoch
	seq   uint64
	idx   int32
	shard int32
}

// waitHeap is a binary min-heap on (at, seq). It is hand-written rather than
// container/heap so that entries are stored by value, not boxed in an
// interface and allocated per AddAfter. Ordering ties by seq makes items
// that become ready together enter the queue in the order they were delayed.
type waitHeap []waitEntry

func (h waitHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

// push grows the heap by doubling, as the key index grows: append grows a
// large slice by a quarter, copying each entry about four times over and
// faulting in a fresh array each time (BenchmarkWorkQueue/AddAfter100k:
// half of an AddAfter's time went to growing the heap).
func (h *waitHeap) push(e waitEntry) {
	if len(*h) == cap(*h) {
		grown := make(waitHeap, len(*h), max(64, 2*cap(*h)))
		copy(grown, *h)
		*h = grown
	}
	*h = append(*h, e)
	h.up(len(*h) - 1)
}

func (h *waitHeap) pop() waitEntry {
	old := *h
	n := len(old) - 1
	e := old[0]
	old[0] = old[n]
	old[n] = waitEntry{}
	*h = old[:n]
	if n > 0 {
		h.down(0)
	}
	return e
}

func (h waitHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (h waitHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// init restores the heap property after entries were filtered out.
func (h waitHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}
