package etcd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
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

// source is a conformance.Source over one prefix of a shared server.
type source struct {
	c      *clientv3.Client
	prefix string
	lw     *etcdinformer.ListerWatcher[item]
}

func newSource(t *testing.T, srv *harness.Etcd, c *clientv3.Client, pageSize int64) *source {
	p := uniquePrefix("conformance")
	lw, err := etcdinformer.New(etcdinformer.Config[item]{Client: c, Prefix: p, PageSize: pageSize})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &source{c: c, prefix: p, lw: lw}
}

func (s *source) ListerWatcher() core.ListerWatcher[item] { return s.lw }
func (s *source) Version(it item) int                     { return it.Version }

func (s *source) Put(ctx context.Context, key string, n int) (core.ResourceVersion, error) {
	return putItem(ctx, s.c, s.prefix+key, item{Version: n})
}

func (s *source) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	resp, err := s.c.Delete(ctx, s.prefix+key)
	if err != nil {
		return 0, err
	}
	if resp.Deleted != 1 {
		return 0, fmt.Errorf("delete %q: %d keys deleted", s.prefix+key, resp.Deleted)
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

func (s *source) PutAll(ctx context.Context, keys []string, n int) (core.ResourceVersion, error) {
	b, _ := json.Marshal(item{Version: n})
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpPut(s.prefix+k, string(b))
	}
	resp, err := s.c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, err
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

// Expire compacts the whole server at its head.
func (s *source) Expire(ctx context.Context) error {
	head, err := s.lw.Head(ctx)
	if err != nil {
		return err
	}
	_, err = s.c.Compact(ctx, int64(head), clientv3.WithCompactPhysical())
	return err
}

func (s *source) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	return putItem(ctx, s.c, s.prefix[:len(s.prefix)-1]+"-other/x", item{Version: 1})
}

var (
	_ conformance.Source[item] = (*source)(nil)
	_ conformance.Transactor   = (*source)(nil)
)

var etcdCaps = conformance.Capabilities{
	DeletesCarryObject:  true,
	DistinguishesUpdate: true,
	ExactWriteRV:        true,
	StrictGoroutines:    true,
}

func TestConformance(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	conformance.Run(t, etcdCaps, func(t *testing.T) conformance.Source[item] {
		return newSource(t, srv, c, 0)
	})
}

// TestConformanceSmallPages runs the suite again with two keys per List
// page, so that every multi-key List crosses pages pinned to one revision.
func TestConformanceSmallPages(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	conformance.Run(t, etcdCaps, func(t *testing.T) conformance.Source[item] {
		return newSource(t, srv, c, 2)
	})
}
