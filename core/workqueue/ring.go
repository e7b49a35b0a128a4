package workqueue

// slot is one entry of the ready queue. seq identifies the push that made
// it: a priority raise pushes the item again at the higher level and leaves
// the old slot behind, so a slot only counts while its seq is the item's
// current one. That lazy deletion keeps the raise O(1) without an index.
type slot struct {
	seq   uint64
	idx   int32 // the item's state, so Get needs no lookup
	shard int32
}

// ring is a FIFO on a power-of-two circular buffer. Unlike client-go's
// re-sliced slice it never reallocates once it has reached the queue's
// high-water mark, so steady Add/Get does not allocate.
type ring struct {
	buf  []slot
	head int
	n    int
}

func (r *ring) push(s slot) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = s
	r.n++
}

func (r *ring) pop() slot {
	s := r.buf[r.head]
	// Clear the slot so a popped key (a pointer, a string) can be collected.
	r.buf[r.head] = slot{}
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return s
}

func (r *ring) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 16
	}
	buf := make([]slot, size)
	if r.n > 0 {
		k := copy(buf, r.buf[r.head:])
		copy(buf[k:], r.buf[:r.head])
	}
	r.buf = buf
	r.head = 0
}
