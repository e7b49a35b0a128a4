package statuspage_test

import (
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
)

// sources are the two sources of the browser test.
type sources struct {
	users, orders core.ListerWatcher[user]
	kind          string // the kind the page names them by
	put           func(t *testing.T, lw core.ListerWatcher[user], key string, u user)
}

func (s *sources) putUser(t *testing.T, key string, u user)  { s.put(t, s.users, key, u) }
func (s *sources) putOrder(t *testing.T, key string, u user) { s.put(t, s.orders, key, u) }

func newSources(t *testing.T) *sources {
	return &sources{
		users:  memory.New[user](memory.Options{}),
		orders: memory.New[user](memory.Options{}),
		kind:   "memory.Source",
		put: func(t *testing.T, lw core.ListerWatcher[user], key string, u user) {
			lw.(*memory.Source[user]).Put(key, u)
		},
	}
}
