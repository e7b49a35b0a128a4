package etcdinformer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// item is the value the tests store, as JSON.
type item struct {
	Version int    `json:"version"`
	Note    string `json:"note,omitempty"`
}

var prefixSeq atomic.Int64

// uniquePrefix returns a fresh directory prefix, so that tests sharing a
// server never see each other's keys.
func uniquePrefix(name string) string {
	return fmt.Sprintf("/test/%s-%d/", name, prefixSeq.Add(1))
}

func putItem(ctx context.Context, c *clientv3.Client, key string, it item) (core.ResourceVersion, error) {
	b, err := json.Marshal(it)
	if err != nil {
		return 0, err
	}
	resp, err := c.Put(ctx, key, string(b))
	if err != nil {
		return 0, err
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

var etcdCaps = conformance.Capabilities{
	DeletesCarryObject:  true,
	DistinguishesUpdate: true,
	ExactWriteRV:        true,
	StrictGoroutines:    true,
}

func TestConformance(t *testing.T) {
	srv := harness.StartEtcd(t)
	conformance.Run(t, etcdCaps, func(t *testing.T) conformance.Harness[etcdtest.Item] {
		return etcdtest.New(t, srv, etcdtest.Options{})
	})
}

// TestConformanceSmallPages runs the suite again with two keys per List
// page, so that every multi-key List crosses pages pinned to one revision.
func TestConformanceSmallPages(t *testing.T) {
	srv := harness.StartEtcd(t)
	conformance.Run(t, etcdCaps, func(t *testing.T) conformance.Harness[etcdtest.Item] {
		return etcdtest.New(t, srv, etcdtest.Options{PageSize: 2})
	})
}
