package natsinformer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
)

type item struct {
	N int `json:"n"`
}

var bucketSeq atomic.Int64

// newBucket creates a fresh file-backed bucket that keeps history, so that
// watching from an old revision sees every later write.
func newBucket(t testing.TB, js jetstream.JetStream, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	t.Helper()
	if cfg.Bucket == "" {
		cfg.Bucket = fmt.Sprintf("b%d", bucketSeq.Add(1))
	}
	if cfg.History == 0 {
		cfg.History = 64
	}
	cfg.Storage = jetstream.FileStorage
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, cfg)
	if err != nil {
		t.Fatalf("create bucket %q: %v", cfg.Bucket, err)
	}
	return kv
}

func put(ctx context.Context, kv jetstream.KeyValue, key string, n int) (uint64, error) {
	b, _ := json.Marshal(item{N: n})
	return kv.Put(ctx, key, b)
}

// del publishes the same DEL marker kv.Delete does, to learn its revision.
func del(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string) (uint64, error) {
	m := nats.NewMsg("$KV." + kv.Bucket() + "." + key)
	m.Header.Set("KV-Operation", "DEL")
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

type kvSource struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
	lw *natsinformer.KV[item]
}

func (s *kvSource) ListerWatcher() core.ListerWatcher[item] { return s.lw }

func (s *kvSource) Put(ctx context.Context, key string, n int) (core.ResourceVersion, error) {
	rv, err := put(ctx, s.kv, "w."+key, n)
	return core.ResourceVersion(rv), err
}

func (s *kvSource) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	rv, err := del(ctx, s.js, s.kv, "w."+key)
	return core.ResourceVersion(rv), err
}

func (s *kvSource) Version(o item) int { return o.N }

func (s *kvSource) Expire(ctx context.Context) error {
	st, err := s.js.Stream(ctx, "KV_"+s.kv.Bucket())
	if err != nil {
		return err
	}
	return st.Purge(ctx)
}

func (s *kvSource) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	rv, err := put(ctx, s.kv, "u.other", 1)
	return core.ResourceVersion(rv), err
}

func TestKVConformance(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	caps := conformance.Capabilities{ExactWriteRV: true, StrictGoroutines: true}
	conformance.Run(t, caps, func(t *testing.T) conformance.Source[item] {
		kv := newBucket(t, js, jetstream.KeyValueConfig{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lw, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[item]{Prefix: "w."})
		if err != nil {
			t.Fatalf("NewKV: %v", err)
		}
		return &kvSource{js: js, kv: kv, lw: lw}
	})
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestKVMissingBucket(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := natsinformer.NewKV(ctx, js, "nope", natsinformer.KVOptions[item]{})
	if !errors.Is(err, jetstream.ErrBucketNotFound) || !contains(err.Error(), `bucket "nope" does not exist`) {
		t.Fatalf("NewKV on a missing bucket: %v, want an error naming it and matching ErrBucketNotFound", err)
	}
}

func TestKVOptionsValidated(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, o := range []natsinformer.KVOptions[item]{
		{Prefix: "users"},  // no trailing dot
		{Prefix: "us*rs."}, // wildcard in a prefix
		{Prefix: "a..b."},  // empty token
		{Filter: "a.>.b"},  // > not last
		{Filter: "a*"},     // wildcard inside a token
		{Filter: "a b"},    // whitespace
		{Prefix: ">."},     // wildcard prefix
	} {
		if _, err := natsinformer.NewKV(ctx, js, kv.Bucket(), o); err == nil {
			t.Errorf("NewKV with %+v: no error", o)
		}
	}
	if _, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[item]{Prefix: "eu.", Filter: "*.config"}); err != nil {
		t.Errorf("NewKV with a valid prefix and filter: %v", err)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
