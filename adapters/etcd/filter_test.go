package etcdinformer_test

import (
	"context"
	"strings"
	"testing"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// filteredPrefix is an etcd prefix watched through a filter: a key range
// pushed down to etcd (the in. keys) and a condition on the decoded value
// evaluated in the adapter (even versions).
type filteredPrefix struct{ *etcdtest.Harness }

func (filteredPrefix) Matches(key string, n int64) bool {
	return strings.HasPrefix(key, "in.") && n%2 == 0
}

// TestFilterEnterLeave runs the filter conformance case (keys entering and
// leaving under concurrent writers, across a relist) over small List
// pages.
func TestFilterEnterLeave(t *testing.T) {
	srv := harness.StartEtcd(t)
	conformance.RunFiltered(t, etcdCaps, func(t *testing.T) conformance.Harness[etcdtest.Item] {
		f := filter.MustNew[etcdtest.Item](filter.And(
			filter.Prefix(filter.Key, "in."),
			filter.Where("even version", func(it etcdtest.Item) bool { return it.Version%2 == 0 }),
		))
		return filteredPrefix{etcdtest.New(t, srv, etcdtest.Options{Where: f, PageSize: 3})}
	})
}

func TestFilterRefused(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	ctx := context.Background()
	f := filter.MustNew[item](filter.Server(filter.Eq("note", "yes")))
	_, err := etcdinformer.NewPrefix(ctx, c, "/x", etcdinformer.Options[item]{Where: f})
	if err == nil || !strings.Contains(err.Error(), `etcd prefix "/x/" cannot evaluate note = "yes"`) {
		t.Errorf("a Server condition on a value field: %v", err)
	}
	f = filter.MustNew[item](filter.And(filter.Ge(filter.Key, "b"), filter.Lt(filter.Key, "a")))
	_, err = etcdinformer.NewPrefix(ctx, c, "/x", etcdinformer.Options[item]{Where: f})
	if err == nil || !strings.Contains(err.Error(), "select no key") {
		t.Errorf("an empty key range: %v", err)
	}
}
