package shardstatus

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/shard"
)

// recent is how many finished handoffs a Recorder keeps.
const recent = 64

// Recorder is a shard.Observer that keeps what it saw for Status, the
// JSON handler and the metrics. The zero value is not usable: use New.
type Recorder struct {
	id string

	mu       sync.Mutex
	members  []shard.Member
	owned    map[int]uint64
	inflight map[handoffKey]time.Time
	done     []Handoff // ring, newest last
	hist     histogram // nil until Register
}

type handoffKey struct {
	shard int
	in    bool
}

var _ shard.Observer = (*Recorder)(nil)

// New returns a Recorder for the replica named id.
func New(id string) *Recorder {
	return &Recorder{id: id, owned: map[int]uint64{}, inflight: map[handoffKey]time.Time{}}
}

// Status is what a Recorder shows.
type Status struct {
	Replica string         `json:"replica"`
	Members []shard.Member `json:"members"`
	// Owned lists the shards owned and loaded here, in order, with their
	// terms.
	Owned []OwnedShard `json:"owned"`
	// InProgress lists the handoffs going on, oldest first.
	InProgress []Handoff `json:"in_progress"`
	// Recent lists the last finished handoffs, newest last.
	Recent []Handoff `json:"recent"`
}

// OwnedShard is one shard owned here.
type OwnedShard struct {
	Shard int    `json:"shard"`
	Term  uint64 `json:"term"`
}

// Handoff is one shard moving here (In) or away.
type Handoff struct {
	Shard int       `json:"shard"`
	In    bool      `json:"in"`
	Start time.Time `json:"start"`
	// Duration: so far for one in progress.
	Duration time.Duration `json:"duration_ns"`
	Err      string        `json:"error,omitempty"`
}

func (r *Recorder) Members(ms []shard.Member) {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b shard.Member) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	r.mu.Lock()
	r.members = ms
	r.mu.Unlock()
}

func (r *Recorder) Owned(owned map[int]uint64) {
	r.mu.Lock()
	r.owned = maps.Clone(owned)
	r.mu.Unlock()
}

func (r *Recorder) HandoffStarted(sh int, in bool) {
	r.mu.Lock()
	r.inflight[handoffKey{sh, in}] = time.Now()
	r.mu.Unlock()
}

func (r *Recorder) HandoffDone(sh int, in bool, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := handoffKey{sh, in}
	start, ok := r.inflight[k]
	if !ok {
		start = time.Now().Add(-d)
	}
	delete(r.inflight, k)
	h := Handoff{Shard: sh, In: in, Start: start, Duration: d}
	if err != nil {
		h.Err = err.Error()
	}
	if len(r.done) == recent {
		r.done = append(r.done[:0], r.done[1:]...)
	}
	r.done = append(r.done, h)
	if r.hist != nil && err == nil {
		r.hist.observe(in, d)
	}
}

// Status returns a copy of what the Recorder saw.
func (r *Recorder) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{Replica: r.id, Members: slices.Clone(r.members), Recent: slices.Clone(r.done)}
	for _, sh := range slices.Sorted(maps.Keys(r.owned)) {
		st.Owned = append(st.Owned, OwnedShard{Shard: sh, Term: r.owned[sh]})
	}
	now := time.Now()
	for k, start := range r.inflight {
		st.InProgress = append(st.InProgress, Handoff{Shard: k.shard, In: k.in, Start: start, Duration: now.Sub(start)})
	}
	slices.SortFunc(st.InProgress, func(a, b Handoff) int { return a.Start.Compare(b.Start) })
	return st
}

// ServeHTTP serves Status as JSON.
func (r *Recorder) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(r.Status())
}
