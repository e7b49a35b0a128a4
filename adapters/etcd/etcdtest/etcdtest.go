package etcdtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/internal/testkit/proxy"
	"github.com/dbinformer/dbinformer/internal/testkit/servers"
)

// Item is the object a Harness stores under each key, as JSON.
type Item struct {
	// Key is the key as given to Put.
	Key string `json:"key"`
	// Version is the n given to Put.
	Version int64 `json:"version"`
	// Payload is Options.Payload, to give values a realistic size.
	Payload string `json:"payload,omitempty"`
}

// Options configures a Harness. The zero value of every field means its
// default.
type Options struct {
	// Prefix is the watched prefix, a directory ending in "/". Empty means
	// a fresh one, "/etcdtest/<n>/", unique within the process.
	Prefix string
	// PageSize is the Prefix's etcdinformer.Options.PageSize.
	PageSize int64
	// Payload is stored in every Item.
	Payload string
	// Faults routes the Prefix's client through a proxy so that Inject can
	// cut it off, and enables the Restart fault, which stops and restarts
	// the server: give a Harness with Faults a server of its own.
	Faults bool
	// Where is the Prefix's partial-sync filter (etcdinformer.Options.Where);
	// Truth then reports only the keys it matches.
	Where *filter.Filter[Item]
}

// Harness is one prefix of a real etcd server and a Prefix watching it.
// Writes and Truth go to the server directly, never through the proxy.
type Harness struct {
	srv      *servers.Etcd
	direct   *clientv3.Client
	client   *clientv3.Client // the Prefix's, through px when Faults
	px       *proxy.Proxy
	prefix   string
	lw       *etcdinformer.Prefix[Item]
	payload  string
	where    *filter.Filter[Item]
	fillerMu sync.Mutex
	filler   int
}

var (
	_ conformance.Harness[Item] = (*Harness)(nil)
	_ conformance.Expirer       = (*Harness)(nil)
	_ conformance.Unwatched     = (*Harness)(nil)
	_ conformance.Transactor    = (*Harness)(nil)
	_ conformance.Truth         = (*Harness)(nil)
	_ conformance.Faults        = (*Harness)(nil)
)

var prefixSeq atomic.Int64

// New returns a Harness over a prefix of srv; its clients (and proxy) are
// closed when the test ends.
func New(tb testing.TB, srv *servers.Etcd, opts Options) *Harness {
	tb.Helper()
	h := &Harness{srv: srv, prefix: opts.Prefix, payload: opts.Payload, where: opts.Where}
	if h.prefix == "" {
		h.prefix = fmt.Sprintf("/etcdtest/%d/", prefixSeq.Add(1))
	}
	if !strings.HasSuffix(h.prefix, "/") {
		tb.Fatalf("etcdtest: prefix %q does not end in /", h.prefix)
	}
	h.direct = srv.Client(tb)
	h.client = h.direct
	if opts.Faults {
		u, err := url.Parse(srv.Endpoints()[0])
		if err != nil {
			tb.Fatalf("etcdtest: %v", err)
		}
		if h.px, err = proxy.New(u.Host); err != nil {
			tb.Fatalf("etcdtest: proxy: %v", err)
		}
		tb.Cleanup(func() { _ = h.px.Close() })
		cfg := srv.ClientConfig()
		cfg.Endpoints = []string{"http://" + h.px.Addr()}
		if h.client, err = clientv3.New(cfg); err != nil {
			tb.Fatalf("etcdtest: client through the proxy: %v", err)
		}
		// Registered after the proxy's: runs first.
		tb.Cleanup(func() { _ = h.client.Close() })
	}
	var err error
	h.lw, err = etcdinformer.NewPrefix(context.Background(), h.client, h.prefix, etcdinformer.Options[Item]{PageSize: opts.PageSize, Where: opts.Where})
	if err != nil {
		tb.Fatalf("etcdtest: NewPrefix: %v", err)
	}
	return h
}

// ListerWatcher returns the Prefix under test.
func (h *Harness) ListerWatcher() driver.ListerWatcher[Item] { return h.lw }

// Prefix returns the Prefix under test.
func (h *Harness) Prefix() *etcdinformer.Prefix[Item] { return h.lw }

// Client returns the client that writes and reads the truth: connected to
// the server directly.
func (h *Harness) Client() *clientv3.Client { return h.direct }

// Server returns the server.
func (h *Harness) Server() *servers.Etcd { return h.srv }

// Key returns the etcd key of key.
func (h *Harness) Key(key string) string { return h.prefix + key }

// Version returns obj.Version.
func (h *Harness) Version(obj Item) int64 { return obj.Version }

// Value returns the JSON value Put stores for key at version n.
func (h *Harness) Value(key string, n int64) string {
	b, err := json.Marshal(Item{Key: key, Version: n, Payload: h.payload})
	if err != nil {
		panic(err) // a struct of strings and an int
	}
	return string(b)
}

// Put writes key at version n and returns the write's revision.
func (h *Harness) Put(ctx context.Context, key string, n int64) (core.ResourceVersion, error) {
	resp, err := h.direct.Put(ctx, h.Key(key), h.Value(key, n))
	if err != nil {
		return 0, err
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

// Delete deletes key and returns the delete's revision. Deleting a key
// that does not exist (a retried delete whose first answer was lost, say)
// changes nothing and returns the current revision.
func (h *Harness) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	resp, err := h.direct.Delete(ctx, h.Key(key))
	if err != nil {
		return 0, err
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

// PutAll writes every key at version n in one Txn and returns its
// revision. etcd limits a Txn to --max-txn-ops operations (128 by
// default).
func (h *Harness) PutAll(ctx context.Context, keys []string, n int64) (core.ResourceVersion, error) {
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpPut(h.Key(k), h.Value(k, n))
	}
	resp, err := h.direct.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, err
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

// unwatched is a key next to the prefix, sharing all its bytes but the
// final "/": it tells a directory prefix from a byte prefix.
func (h *Harness) unwatched(i int) string {
	return fmt.Sprintf("%s-unwatched/%d", strings.TrimSuffix(h.prefix, "/"), i)
}

// PutUnwatched writes next to the prefix and returns the write's revision.
func (h *Harness) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	h.fillerMu.Lock()
	h.filler++
	k := h.unwatched(h.filler)
	h.fillerMu.Unlock()
	resp, err := h.direct.Put(ctx, k, h.Value(k, 1))
	if err != nil {
		return 0, err
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

// Expire compacts the server's whole history up to its head, physically
// (the compaction is done when Expire returns).
func (h *Harness) Expire(ctx context.Context) error {
	head, err := h.Head(ctx)
	if err != nil {
		return err
	}
	_, err = h.direct.Compact(ctx, int64(head), clientv3.WithCompactPhysical())
	return err
}

// Truth reads the prefix from etcd: key -> Version, of the keys
// Options.Where matches.
func (h *Harness) Truth(ctx context.Context) (map[string]int64, error) {
	resp, err := h.direct.Get(ctx, h.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var it Item
		if err := json.Unmarshal(kv.Value, &it); err != nil {
			return nil, fmt.Errorf("etcdtest: %s: %w", kv.Key, err)
		}
		if k := strings.TrimPrefix(string(kv.Key), h.prefix); h.where.Match(k, it) {
			out[k] = it.Version
		}
	}
	return out, nil
}

// Head returns the server's current revision, read directly.
func (h *Harness) Head(ctx context.Context) (core.ResourceVersion, error) {
	resp, err := h.direct.Get(ctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

// Faults lists Cut, Pause, Restart, Expire and Freeze with Options.Faults,
// and nothing otherwise.
func (h *Harness) Faults() []conformance.Fault {
	if h.px == nil {
		return nil
	}
	return []conformance.Fault{conformance.Cut, conformance.Pause, conformance.Restart, conformance.Expire, conformance.Freeze}
}

// Inject starts fault f:
//   - Cut closes the Prefix's connections (the client reconnects at once);
//   - Pause closes them and refuses new ones until end;
//   - Restart stops the server until end starts it again on its data;
//   - Freeze holds every byte between the Prefix's client and the server,
//     connections open, until end (the client's keepalives notice it);
//   - Expire pauses the Prefix's connections, and end writes two revisions
//     next to the prefix (so that the compaction passes the Prefix's
//     position even if nothing else was written), compacts at the head and
//     lets the Prefix back.
func (h *Harness) Inject(tb testing.TB, ctx context.Context, f conformance.Fault) (end func(), writable bool) {
	tb.Helper()
	if h.px == nil {
		tb.Fatalf("etcdtest: Inject(%s) on a Harness made without Options.Faults", f)
	}
	switch f {
	case conformance.Cut:
		h.px.Cut()
		return nil, false
	case conformance.Pause:
		h.px.Pause()
		h.px.Cut()
		return h.px.Resume, true
	case conformance.Restart:
		h.srv.Stop()
		return func() { h.srv.Restart(tb) }, false
	case conformance.Freeze:
		h.px.Freeze()
		return h.px.Thaw, true
	case conformance.Expire:
		h.px.Pause()
		h.px.Cut()
		return func() {
			for range 2 {
				retry(tb, ctx, "etcdtest: write next to the prefix", func(ctx context.Context) error {
					_, err := h.PutUnwatched(ctx)
					return err
				})
			}
			retry(tb, ctx, "etcdtest: compact", h.Expire)
			h.px.Resume()
		}, true
	}
	tb.Fatalf("etcdtest: no fault %q", f)
	return nil, false
}

// Heal ends any outage: the proxy accepts connections and the server runs.
func (h *Harness) Heal(tb testing.TB) {
	tb.Helper()
	if h.px != nil {
		h.px.Resume()
	}
	if !h.srv.Running() {
		h.srv.Restart(tb)
	}
}

// retry calls f until it succeeds, for a minute at most (a server coming
// back from a restart may take a moment).
func retry(tb testing.TB, ctx context.Context, what string, f func(context.Context) error) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	var err error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = f(cctx)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("%s: %v", what, errors.Join(err, ctx.Err()))
}
