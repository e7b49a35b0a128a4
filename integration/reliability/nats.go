//go:build reliability_port

// Built only with -tags reliability_port until this file is ported to the
// push-style watch and the renamed adapter API (see WAVE2-PLAN.md): the
// adapter helper rewrites it onto reliability.Register and its adapter's
// <x>test harness.

package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
)

const natsBucket = "reliability"

// NATS drives an embedded nats-server with a KV bucket. Expire purges the
// bucket's stream below its head while the informer is cut off, so keys
// whose last value was older vanish from the source as well.
type NATS struct {
	srv     *harness.NATS
	px      *proxy.Proxy
	direct  *nats.Conn
	viaPx   *nats.Conn
	kv      jetstream.KeyValue
	stream  jetstream.Stream
	lw      *natsinformer.KV[Obj]
	history uint8
}

var _ Adapter[Obj] = (*NATS)(nil)

func (n *NATS) Name() string { return "nats" }

func natsConnect(t testing.TB, url string) *nats.Conn {
	nc, err := nats.Connect(url,
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.Timeout(5*time.Second),
	)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	return nc
}

func (n *NATS) Start(t testing.TB, rnd *rand.Rand) string {
	n.srv = harness.StartNATS(t)
	u, err := url.Parse(n.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if n.px, err = proxy.New(u.Host); err != nil {
		t.Fatal(err)
	}
	n.direct = natsConnect(t, n.srv.URL())
	n.viaPx = natsConnect(t, "nats://"+n.px.Addr())
	djs, err := jetstream.New(n.direct)
	if err != nil {
		t.Fatal(err)
	}
	// History 1 (the default) and 5 take different paths in the adapter
	// on resume: with 1, rewritten keys leave gaps below the head.
	n.history = uint8(1 + 4*rnd.IntN(2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n.kv, err = djs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: natsBucket, History: n.history}); err != nil {
		t.Fatal(err)
	}
	if n.stream, err = djs.Stream(ctx, "KV_"+natsBucket); err != nil {
		t.Fatal(err)
	}
	pjs, err := jetstream.New(n.viaPx)
	if err != nil {
		t.Fatal(err)
	}
	if n.lw, err = natsinformer.NewKV[Obj](ctx, pjs, natsBucket, natsinformer.KVOptions[Obj]{}); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("KV history %d", n.history)
}

func (n *NATS) ListerWatcher() core.ListerWatcher[Obj] { return n.lw }

func (n *NATS) Put(ctx context.Context, key string, ver int64) error {
	b, _ := json.Marshal(Obj{K: key, V: ver})
	_, err := n.kv.Put(ctx, key, b)
	return err
}

func (n *NATS) Delete(ctx context.Context, key string) error {
	return n.kv.Delete(ctx, key)
}

func (n *NATS) Truth(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	lister, err := n.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	// Keys ends when the listing is complete; Stop then only reports that
	// the subscription is already gone.
	_ = lister.Stop()
	for _, k := range keys {
		e, err := n.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var o Obj
		if err := json.Unmarshal(e.Value(), &o); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = o.V
	}
	return out, nil
}

func (n *NATS) Head(ctx context.Context) (core.ResourceVersion, error) {
	info, err := n.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	return core.ResourceVersion(info.State.LastSeq), nil
}

func (n *NATS) Version(o Obj) int64 { return o.V }

func (n *NATS) Faults() []Fault { return []Fault{Cut, Pause, Restart, Expire} }

func (n *NATS) Inject(t testing.TB, ctx context.Context, f Fault) (func(), bool) {
	switch f {
	case Cut:
		n.px.Cut()
		return nil, false
	case Pause:
		n.px.Pause()
		n.px.Cut()
		return n.px.Resume, true
	case Restart:
		n.srv.Stop()
		return func() { n.srv.Restart(t) }, false
	case Expire:
		n.px.Pause()
		n.px.Cut()
		return func() {
			retry(t, ctx, "purge the bucket's stream below its head", func(ctx context.Context) error {
				head, err := n.Head(ctx)
				if err != nil {
					return err
				}
				return n.stream.Purge(ctx, jetstream.WithPurgeSequence(uint64(head)))
			})
			n.px.Resume()
		}, true
	}
	t.Fatalf("nats: no fault %q", f)
	return nil, false
}

func (n *NATS) Heal(t testing.TB) { n.px.Resume() }

func (n *NATS) Stop(t testing.TB) {
	if n.viaPx != nil {
		n.viaPx.Close()
	}
	if n.direct != nil {
		n.direct.Close()
	}
	if n.px != nil {
		_ = n.px.Close()
	}
	if n.srv != nil {
		n.srv.Stop()
	}
}
