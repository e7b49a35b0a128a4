//go:build reliability_port

// Built only with -tags reliability_port until this file is ported to the
// push-style watch and the renamed adapter API (see WAVE2-PLAN.md): the
// adapter helper rewrites it onto reliability.Register and its adapter's
// <x>test harness.

package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
)

const etcdPrefix = "/reliability/"

// Etcd drives an embedded etcd. Expire compacts the history past the
// informer's position while it is cut off.
type Etcd struct {
	srv    *harness.Etcd
	px     *proxy.Proxy
	direct *clientv3.Client
	viaPx  *clientv3.Client
	lw     *etcdinformer.Prefix[Obj]
	filler int
}

var _ Adapter[Obj] = (*Etcd)(nil)

func (e *Etcd) Name() string { return "etcd" }

func (e *Etcd) Start(t testing.TB, _ *rand.Rand) string {
	e.srv = harness.StartEtcd(t)
	u, err := url.Parse(e.srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if e.px, err = proxy.New(u.Host); err != nil {
		t.Fatal(err)
	}
	if e.direct, err = clientv3.New(clientv3.Config{Endpoints: e.srv.Endpoints(), DialTimeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if e.viaPx, err = clientv3.New(clientv3.Config{Endpoints: []string{"http://" + e.px.Addr()}, DialTimeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if e.lw, err = etcdinformer.NewPrefix(context.Background(), e.viaPx, etcdPrefix, etcdinformer.Options[Obj]{}); err != nil {
		t.Fatal(err)
	}
	return "embedded etcd"
}

func (e *Etcd) ListerWatcher() core.ListerWatcher[Obj] { return e.lw }

func (e *Etcd) Put(ctx context.Context, key string, ver int64) error {
	b, _ := json.Marshal(Obj{K: key, V: ver})
	_, err := e.direct.Put(ctx, etcdPrefix+key, string(b))
	return err
}

func (e *Etcd) Delete(ctx context.Context, key string) error {
	_, err := e.direct.Delete(ctx, etcdPrefix+key)
	return err
}

func (e *Etcd) Truth(ctx context.Context) (map[string]int64, error) {
	resp, err := e.direct.Get(ctx, etcdPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		var o Obj
		if err := json.Unmarshal(kv.Value, &o); err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		out[string(kv.Key[len(etcdPrefix):])] = o.V
	}
	return out, nil
}

func (e *Etcd) Head(ctx context.Context) (core.ResourceVersion, error) {
	resp, err := e.direct.Get(ctx, etcdPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return core.ResourceVersion(resp.Header.Revision), nil
}

func (e *Etcd) Version(o Obj) int64 { return o.V }

func (e *Etcd) Faults() []Fault { return []Fault{Cut, Pause, Restart, Expire} }

func (e *Etcd) Inject(t testing.TB, ctx context.Context, f Fault) (func(), bool) {
	switch f {
	case Cut:
		e.px.Cut()
		return nil, false
	case Pause:
		e.px.Pause()
		e.px.Cut()
		return e.px.Resume, true
	case Restart:
		e.srv.Stop()
		return func() { e.srv.Restart(t) }, false
	case Expire:
		e.px.Pause()
		e.px.Cut()
		return func() {
			// Two revisions outside the prefix, so that the compaction
			// passes the informer's position even if the workload wrote
			// nothing meanwhile.
			for range 2 {
				e.filler++
				retry(t, ctx, "etcd filler write", func(ctx context.Context) error {
					_, err := e.direct.Put(ctx, fmt.Sprintf("/filler/%d", e.filler), "x")
					return err
				})
			}
			var head core.ResourceVersion
			retry(t, ctx, "etcd head", func(ctx context.Context) error {
				var err error
				head, err = e.Head(ctx)
				return err
			})
			e.srv.Compact(t, int64(head))
			e.px.Resume()
		}, true
	}
	t.Fatalf("etcd: no fault %q", f)
	return nil, false
}

func (e *Etcd) Heal(t testing.TB) { e.px.Resume() }

func (e *Etcd) Stop(t testing.TB) {
	if e.viaPx != nil {
		_ = e.viaPx.Close()
	}
	if e.direct != nil {
		_ = e.direct.Close()
	}
	if e.px != nil {
		_ = e.px.Close()
	}
	if e.srv != nil {
		e.srv.Close()
	}
}
