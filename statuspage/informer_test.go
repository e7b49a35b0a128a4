package statuspage_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/statuspage"
)

// A head that cannot be read makes the lag unknown, and says since when;
// it never shows the lag of the last good read, nor 0.
func TestLagUnknownWhileTheHeadCannotBeRead(t *testing.T) {
	clk := clock.NewFake(t0)
	page := statuspage.New(statuspage.Options{Clock: clk, HeadInterval: time.Second})
	head := &countingHead{head: 9}
	page.Add(&fakeInformer{name: "x", synced: true, applied: 5, received: 5, head: head})
	if is := snapshotOf(t, page, "x"); is.LagVersions == nil || *is.LagVersions != 4 {
		t.Fatalf("lag with a readable head = %v", is.LagVersions)
	}
	head.fail(errors.New("etcdserver: no leader"))
	clk.Step(time.Second)
	failedAt := clk.Now()
	is := snapshotOf(t, page, "x")
	if is.LagVersions != nil || is.LagSeconds != nil || is.HeadVersion != nil {
		t.Errorf("lag %v versions, %v seconds, head %v while the head cannot be read; want all unknown", is.LagVersions, is.LagSeconds, is.HeadVersion)
	}
	if is.LagUnknownSince == nil || !is.LagUnknownSince.Equal(failedAt) || !strings.Contains(is.HeadError, "no leader") {
		t.Errorf("LagUnknownSince %v (want %v), HeadError %q", is.LagUnknownSince, failedAt, is.HeadError)
	}
	clk.Step(time.Minute)
	_, html := get(t, page, "/debug/informers/")
	if !strings.Contains(html, "unknown since 2026-01-02 03:04:06 UTC (1m00s ago)") {
		t.Errorf("the HTML does not say since when the lag is unknown:\n%s", html)
	}
	head.fail(nil)
	clk.Step(time.Second)
	if is := snapshotOf(t, page, "x"); is.LagVersions == nil || *is.LagVersions != 4 || is.LagUnknownSince != nil {
		t.Errorf("after the head is readable again: lag %v, unknown since %v", is.LagVersions, is.LagUnknownSince)
	}

	page.Add(&fakeInformer{name: "headless", synced: true, applied: 5, received: 5})
	if is := snapshotOf(t, page, "headless"); !is.NoHead || is.LagVersions != nil || is.HeadError != "" {
		t.Errorf("a source that cannot tell its head: %+v", is)
	}
}

// The page reads the name, the source's kind and head, the checkpoints and
// a permanent stop from the informer itself: no string names, no metrics
// needed.
func TestPageReadsTheInformer(t *testing.T) {
	src := memory.New[user](memory.Options{})
	src.Put("a", user{Name: "a"})
	store, err := checkpoint.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	inf := core.NewSharedIndexInformer[user](src, core.InformerOptions[user]{
		Name:        "users",
		Undecodable: core.StopOnUndecodable,
		Checkpoint:  &core.CheckpointOptions[user]{Store: store, Codec: codec.JSON[user]{}, Interval: 10 * time.Millisecond},
	})
	plain := core.NewSharedIndexInformer[user](src, core.InformerOptions[user]{Name: "plain"})
	page := statuspage.New(statuspage.Options{})
	page.Add(inf)
	page.Add(plain)
	if is := snapshotOf(t, page, "plain"); !strings.HasPrefix(is.Checkpoints, "off (") {
		t.Errorf("checkpoints of an informer without them: %q", is.Checkpoints)
	}
	if is := snapshotOf(t, page, "users"); !strings.HasPrefix(is.Checkpoints, "none saved yet") {
		t.Errorf("checkpoints before the first save: %q", is.Checkpoints)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	src.Put("b", user{Name: "b"})
	informertest.Eventually(t, "a checkpoint on the page", func() bool {
		return strings.HasPrefix(snapshotOf(t, page, "users").Checkpoints, "saved version ")
	})
	is := snapshotOf(t, page, "users")
	if is.Kind != "memory.Source" || is.HeadVersion == nil || !is.Live {
		t.Errorf("kind %q, head %v, live %v", is.Kind, is.HeadVersion, is.Live)
	}

	src.InjectDecodeError("a", errors.New("a producer wrote another shape"))
	if err := <-done; !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("Run = %v", err)
	}
	is = snapshotOf(t, page, "users")
	if is.Live || !strings.HasPrefix(is.NotLiveReason, "stopped: failed permanently") || !strings.Contains(is.NotLiveReason, "frozen at version") {
		t.Errorf("a stopped informer: live %v, %q", is.Live, is.NotLiveReason)
	}
	if err := page.Live(context.Background()); !errors.Is(err, statuspage.ErrNotLive) {
		t.Errorf("page.Live with a stopped informer = %v", err)
	}
}
