package leader

import (
	"context"
	"sync"
)

// Shared lets several users share each term of one election: one
// campaign, one lock or lease, one epoch, and every member (an Elector of
// its own, Member) leads while it lasts. It is how one process relays
// every table of one Postgres Source — one slot, which only one process
// may read — under a single election: one relay.Relay per table, each
// with a Member as its Options.Elector, rather than one election per
// table, which the same process could not win twice (a Postgres advisory
// lock is per session; two candidates of one process would compete).
//
// Run campaigns; call it once, beside the members' Runs. A member's lead
// starts when a term starts (or when the member's Run is called during
// one) and its context ends, cause ErrLost, when the term is lost; the
// term's resignation waits until every member's lead has returned, so
// that the next leader never runs beside a member of this one's. A
// member's lead that returns while the term lasts ends that member's Run
// with its error and leaves the term to the others (a Shared election
// is given up only when Run's context ends).
type Shared struct {
	el Elector

	mu      sync.Mutex
	cur     *sharedTerm   // nil between terms
	changed chan struct{} // closed and replaced when cur changes
}

// sharedTerm is one term as the members see it.
type sharedTerm struct {
	term  Term
	ctx   context.Context // the election's lead context
	ended bool            // no member may join any more
	leads sync.WaitGroup  // members leading in it
}

// Share returns a Shared election over el, which it alone may run.
func Share(el Elector) *Shared {
	return &Shared{el: el, changed: make(chan struct{})}
}

// Run campaigns through the shared Elector until ctx ends (then nil).
func (s *Shared) Run(ctx context.Context) error {
	return s.el.Run(ctx, func(lctx context.Context, t Term) error {
		st := &sharedTerm{term: t, ctx: lctx}
		s.set(st)
		<-lctx.Done()
		s.mu.Lock()
		st.ended = true
		s.mu.Unlock()
		s.set(nil)
		st.leads.Wait()
		return nil
	})
}

func (s *Shared) set(st *sharedTerm) {
	s.mu.Lock()
	s.cur = st
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Member returns an Elector whose terms are the Shared election's.
func (s *Shared) Member() Elector { return member{s} }

type member struct{ s *Shared }

// Run: see Shared.
func (m member) Run(ctx context.Context, lead func(context.Context, Term) error) error {
	s := m.s
	for {
		s.mu.Lock()
		st, changed := s.cur, s.changed
		joined := st != nil && !st.ended
		if joined {
			st.leads.Add(1)
		}
		s.mu.Unlock()
		if !joined {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
			}
			continue
		}
		err := m.lead(ctx, st, lead)
		if ctx.Err() != nil {
			return nil
		}
		if st.ctx.Err() == nil {
			return err // returned while the term lasts
		}
		// Lost: the next term, if any.
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// lead runs lead in st, with a context that ends with the term (cause
// ErrLost) or with ctx.
func (m member) lead(ctx context.Context, st *sharedTerm, lead func(context.Context, Term) error) error {
	defer st.leads.Done()
	lctx, cancel := context.WithCancelCause(st.ctx)
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	return lead(lctx, st.term)
}
