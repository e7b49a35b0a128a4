package natstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/internal/testkit/proxy"
	"github.com/dbinformer/dbinformer/internal/testkit/servers"
)

// Obj is what the harnesses store (as JSON): the key as given to Put and
// the version Put gave it.
type Obj struct {
	K string `json:"k"`
	V int64  `json:"v"`
}

// Config says where a harness's bucket or stream lives and how its
// ListerWatcher reaches it. The zero value (with Server set) is a
// file-backed bucket keeping 64 values per key on one server, the
// ListerWatcher connected directly.
type Config struct {
	// Server is the single server. Ignored when Cluster is set.
	Server *servers.NATS
	// Cluster puts the bucket or stream on a cluster, with Replicas
	// replicas (default 3).
	Cluster  *servers.NATSCluster
	Replicas int
	// ListenNode is the node the ListerWatcher's connection goes to,
	// WriteNode the node writes and truth reads go to (cluster only).
	ListenNode, WriteNode int
	// History is the number of values a bucket keeps per key (default
	// 64, so that watching from an old revision sees every later write).
	History uint8
	// Proxy puts an internal/testkit/proxy between the ListerWatcher and its
	// server, for the Cut, Pause and Expire faults.
	Proxy bool
	// IdleCheck is passed to the ListerWatcher's options.
	IdleCheck time.Duration
	// BatchSize is passed to the ListerWatcher's options.
	BatchSize int
	// KVWhere is the KV ListerWatcher's partial-sync filter
	// (KVOptions.Where); Truth then reports only the keys it matches.
	KVWhere *filter.Filter[Obj]
	// Stateless is passed to the EventStream ListerWatcher's options
	// (each message is its entity's whole state).
	Stateless bool
}

// StepDown is a fault of a harness on a cluster: the stream's leader
// steps down and another replica takes over while the watch runs.
const StepDown conformance.Fault = "stepdown"

var seq atomic.Int64

// base is what both harnesses share: the clients, the proxy and the
// faults.
type base struct {
	cfg    Config
	name   string // stream name
	writer jetstream.JetStream
	legacy nats.JetStreamContext // leader-only reads (STREAM.MSG.GET)
	lwJS   jetstream.JetStream
	px     *proxy.Proxy
	stream jetstream.Stream
	prefix string // subject prefix of watched keys
}

func (b *base) setup(t testing.TB, cfg Config) {
	t.Helper()
	if cfg.Cluster == nil && cfg.Server == nil {
		t.Fatal("natstest: Config needs a Server or a Cluster")
	}
	if cfg.Cluster != nil && cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.History == 0 {
		cfg.History = 64
	}
	b.cfg = cfg
	var writeURL, lwURL string
	if cfg.Cluster != nil {
		writeURL, lwURL = cfg.Cluster.URL(cfg.WriteNode), cfg.Cluster.URL(cfg.ListenNode)
	} else {
		writeURL, lwURL = cfg.Server.URL(), cfg.Server.URL()
	}
	if cfg.Proxy {
		u, err := url.Parse(lwURL)
		if err != nil {
			t.Fatal(err)
		}
		px, err := proxy.New(u.Host)
		if err != nil {
			t.Fatalf("natstest: proxy: %v", err)
		}
		t.Cleanup(func() { _ = px.Close() })
		b.px = px
		lwURL = "nats://" + px.Addr()
	}
	wc := connect(t, writeURL)
	var err error
	if b.writer, err = jetstream.New(wc); err != nil {
		t.Fatal(err)
	}
	if b.legacy, err = wc.JetStream(); err != nil {
		t.Fatal(err)
	}
	if b.lwJS, err = jetstream.New(connect(t, lwURL)); err != nil {
		t.Fatal(err)
	}
}

func connect(t testing.TB, u string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(u,
		nats.Name(t.Name()),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.IgnoreDiscoveredServers(),
		nats.Timeout(5*time.Second),
	)
	if err != nil {
		t.Fatalf("natstest: connect to %s: %v", u, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// publish writes one message, retrying what a cluster recovers from (no
// responders, a timeout across a leader change) under one message id, so
// that a retried write is stored once.
func (b *base) publish(ctx context.Context, m *nats.Msg) (core.ResourceVersion, error) {
	var id [12]byte
	_, _ = rand.Read(id[:])
	msgID := hex.EncodeToString(id[:])
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := b.writer.PublishMsg(actx, m, jetstream.WithMsgID(msgID))
		cancel()
		if err == nil {
			return core.ResourceVersion(ack.Sequence), nil
		}
		if ctx.Err() != nil || !retriable(err) {
			return 0, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func retriable(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.As(err, &api) && (api.Code == 503 || api.Code == 408 || api.ErrorCode == 10008)
}

// Head is the stream's last sequence, read from its leader.
func (b *base) Head(ctx context.Context) (core.ResourceVersion, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := b.stream.Info(actx)
		cancel()
		if err == nil && (info.Cluster == nil || info.Cluster.Leader != "") {
			return core.ResourceVersion(info.State.LastSeq), nil
		}
		if err != nil && (ctx.Err() != nil || !retriable(err)) {
			return 0, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// truth reads the last message of every subject below prefix from the
// stream's leader; last decides what each says.
func (b *base) truth(ctx context.Context, last func(m *nats.RawStreamMsg) (v int64, live bool, err error)) (map[string]int64, error) {
	var subjects map[string]uint64
	for {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		info, err := b.stream.Info(actx, jetstream.WithSubjectFilter(b.prefix+">"))
		cancel()
		if err == nil && (info.Cluster == nil || info.Cluster.Leader != "") {
			subjects = info.State.Subjects
			break
		}
		if err != nil && (ctx.Err() != nil || !retriable(err)) {
			return nil, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	out := make(map[string]int64, len(subjects))
	for subj := range subjects {
		var m *nats.RawStreamMsg
		var err error
		for {
			m, err = b.legacy.GetLastMsg(b.name, subj, nats.Context(ctx))
			if err == nil || errors.Is(err, nats.ErrMsgNotFound) || ctx.Err() != nil || !retriable(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if errors.Is(err, nats.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("last message on %q: %w", subj, err)
		}
		v, live, err := last(m)
		if err != nil {
			return nil, fmt.Errorf("last message on %q: %w", subj, err)
		}
		if live {
			out[strings.TrimPrefix(subj, b.prefix)] = v
		}
	}
	return out, nil
}

// Faults lists what Inject supports: Cut, Pause, Expire and Freeze need
// the proxy; Restart stops the server (a cluster: the stream leader's node);
// StepDown needs a cluster.
func (b *base) Faults() []conformance.Fault {
	var fs []conformance.Fault
	if b.px != nil {
		fs = append(fs, conformance.Cut, conformance.Pause, conformance.Expire, conformance.Freeze)
	}
	fs = append(fs, conformance.Restart)
	if b.cfg.Cluster != nil {
		fs = append(fs, StepDown)
	}
	return fs
}

// Inject starts fault f: see conformance.Faults.
func (b *base) Inject(t testing.TB, ctx context.Context, f conformance.Fault) (end func(), writable bool) {
	switch {
	case f == conformance.Cut && b.px != nil:
		b.px.Cut()
		return nil, false
	case f == conformance.Pause && b.px != nil:
		b.px.Pause()
		b.px.Cut()
		return b.px.Resume, true
	case f == conformance.Freeze && b.px != nil:
		b.px.Freeze()
		return b.px.Thaw, true
	case f == conformance.Expire && b.px != nil:
		b.px.Pause()
		b.px.Cut()
		return func() {
			for {
				head, err := b.Head(ctx)
				if err == nil {
					actx, cancel := context.WithTimeout(ctx, 10*time.Second)
					err = b.stream.Purge(actx, jetstream.WithPurgeSequence(uint64(head)))
					cancel()
				}
				if err == nil || ctx.Err() != nil {
					break
				}
				t.Logf("natstest: purge the stream below its head: %v (retrying)", err)
				time.Sleep(50 * time.Millisecond)
			}
			b.px.Resume()
		}, true
	case f == conformance.Restart && b.cfg.Cluster == nil:
		b.cfg.Server.Stop()
		return func() { b.cfg.Server.Restart(t) }, false
	case f == conformance.Restart:
		// The stream leader's node: the others elect a new leader and
		// keep taking writes, unless the writer's own node is the one down.
		c := b.cfg.Cluster
		i := c.WaitStreamLeader(t, b.name)
		c.Nodes[i].Stop()
		return func() { c.Nodes[i].Restart(t); c.WaitReady(t) }, i != b.cfg.WriteNode
	case f == StepDown && b.cfg.Cluster != nil:
		b.cfg.Cluster.StepDown(b.name)
		return nil, true
	}
	t.Fatalf("natstest: no fault %q", f)
	return nil, false
}

// Heal ends any outage: the proxy accepts again, every server runs.
func (b *base) Heal(t testing.TB) {
	if b.px != nil {
		b.px.Resume()
	}
	if b.cfg.Cluster != nil {
		for _, n := range b.cfg.Cluster.Nodes {
			if n.Server() == nil {
				n.Restart(t)
			}
		}
		b.cfg.Cluster.WaitReady(t)
	} else if b.cfg.Server.Server() == nil {
		b.cfg.Server.Restart(t)
	}
}

// Expire purges the whole stream: no version up to the head can be
// watched from any more.
func (b *base) Expire(ctx context.Context) error { return b.stream.Purge(ctx) }

// Proxy is the proxy between the ListerWatcher and its server, or nil.
func (b *base) Proxy() *proxy.Proxy { return b.px }

// ListenJetStream is the JetStream context the ListerWatcher uses (through
// the proxy, if any), for another ListerWatcher or a raw reader on the
// same path.
func (b *base) ListenJetStream() jetstream.JetStream { return b.lwJS }

// Writer is the JetStream context writes go through (not the
// ListerWatcher's).
func (b *base) Writer() jetstream.JetStream { return b.writer }

// StreamName is the name of the stream behind the harness.
func (b *base) StreamName() string { return b.name }

// Stream is the stream behind the harness, as the writer sees it.
func (b *base) Stream() jetstream.Stream { return b.stream }

// KV is a harness over a fresh bucket "b<n>"; the ListerWatcher watches
// the keys below "w." (Put's keys), PutUnwatched writes "u.other".
type KV struct {
	base
	kv    jetstream.KeyValue
	lw    *natsinformer.KV[Obj]
	where *filter.Filter[Obj]
}

var (
	_ conformance.Harness[Obj] = (*KV)(nil)
	_ conformance.Expirer      = (*KV)(nil)
	_ conformance.Unwatched    = (*KV)(nil)
	_ conformance.Truth        = (*KV)(nil)
	_ conformance.Faults       = (*KV)(nil)
)

// NewKV creates the bucket and the ListerWatcher.
func NewKV(t testing.TB, cfg Config) *KV {
	t.Helper()
	h := &KV{}
	h.setup(t, cfg)
	bucket := fmt.Sprintf("b%d", seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	h.kv, err = retryPlacement(ctx, func() (jetstream.KeyValue, error) {
		return h.writer.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: bucket, History: h.cfg.History, Storage: jetstream.FileStorage, Replicas: h.cfg.Replicas,
		})
	})
	if err != nil {
		t.Fatalf("natstest: create bucket %q: %v", bucket, err)
	}
	h.name = "KV_" + bucket
	h.prefix = "$KV." + bucket + ".w."
	if h.stream, err = h.writer.Stream(ctx, h.name); err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster != nil {
		cfg.Cluster.WaitStreamLeader(t, h.name)
	}
	h.lw, err = natsinformer.NewKV(ctx, h.lwJS, bucket, natsinformer.KVOptions[Obj]{
		Prefix: "w.", IdleCheck: cfg.IdleCheck, BatchSize: cfg.BatchSize, Where: cfg.KVWhere,
	})
	h.where = cfg.KVWhere
	if err != nil {
		t.Fatalf("natstest: NewKV: %v", err)
	}
	return h
}

// ListerWatcher is the adapter under test.
func (h *KV) ListerWatcher() driver.ListerWatcher[Obj] { return h.lw }

// KV is the adapter under test, typed.
func (h *KV) KV() *natsinformer.KV[Obj] { return h.lw }

// Bucket is the bucket as the writer sees it.
func (h *KV) Bucket() jetstream.KeyValue { return h.kv }

// Put writes key below "w." with version n.
func (h *KV) Put(ctx context.Context, key string, n int64) (core.ResourceVersion, error) {
	data, _ := json.Marshal(Obj{K: key, V: n})
	m := nats.NewMsg(h.prefix + key)
	m.Data = data
	return h.publish(ctx, m)
}

// Delete writes the DEL marker kv.Delete writes, to learn its revision.
func (h *KV) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	m := nats.NewMsg(h.prefix + key)
	m.Header.Set("KV-Operation", "DEL")
	return h.publish(ctx, m)
}

// Version is the version Put gave obj.
func (h *KV) Version(obj Obj) int64 { return obj.V }

// PutUnwatched writes the key "u.other", outside the watched prefix.
func (h *KV) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	m := nats.NewMsg("$KV." + h.kv.Bucket() + ".u.other")
	m.Data = []byte(`{"k":"other","v":1}`)
	return h.publish(ctx, m)
}

// Truth reads every live key's version from the stream leader.
func (h *KV) Truth(ctx context.Context) (map[string]int64, error) {
	return h.truth(ctx, func(m *nats.RawStreamMsg) (int64, bool, error) {
		if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" || m.Header.Get(jetstream.MarkerReasonHeader) != "" {
			return 0, false, nil
		}
		var o Obj
		err := json.Unmarshal(m.Data, &o)
		key := strings.TrimPrefix(m.Subject, "$KV."+h.kv.Bucket()+".w.")
		return o.V, err == nil && h.where.Match(key, o), err
	})
}
