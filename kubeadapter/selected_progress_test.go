package kubeinformer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// countingProbes counts the short watches a Resource opens to answer a
// progress request (those with a timeout).
type countingProbes struct {
	kubeinformer.Client[*corev1.ConfigMapList]
	probes atomic.Int32
}

func (c *countingProbes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.TimeoutSeconds != nil {
		c.probes.Add(1)
	}
	return c.Client.Watch(ctx, opts)
}

// TestSelectedWatchProgressOverFilteredOutChanges: the last write is a
// ConfigMap that the label selector does not match. The apiserver's watch
// cache replays it to a watch reopened from an earlier version (filtering
// it out) and then sends that watch no bookmark until some later write
// moves its version: the short watch opened for a progress request ends
// without one (issue 18: a kube-filtered restart in 50 took ~10s, the
// apiserver's own lease renewal being that later write). The request must
// still be answered after that one short watch, by a bookmark at a version
// at or after the head whose claim holds: the next matching change arrives
// after it, in order, and nothing arrives at or below it.
func TestSelectedWatchProgressOverFilteredOutChanges(t *testing.T) {
	h := kubetest.NewConfigMaps(t, harness.StartKube(t), kubetest.Options{})
	cs, ns := h.Direct(), h.Namespace()
	viaProxy, err := kubernetes.NewForConfig(h.ProxiedConfig())
	if err != nil {
		t.Fatal(err)
	}
	client := &countingProbes{Client: viaProxy.CoreV1().ConfigMaps(ns)}
	r, err := kubeinformer.NewResource[*corev1.ConfigMap](context.Background(), client, kubeinformer.Options{
		Namespace: ns, LabelSelector: "mod3 in (1,2)", Logger: debugLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	in := map[string]string{"mod3": "1"}
	if _, err := kubetest.PutConfigMap(ctx, cs, ns, "a", 1, in); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	from, err := r.List(ctx, driver.ListSink[*corev1.ConfigMap]{Emit: func(e driver.Event[*corev1.ConfigMap]) error {
		listed[e.Key] = true
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !listed[h.EventKey("a")] || len(listed) != 1 {
		t.Fatalf("listed %v, want only %s", listed, h.EventKey("a"))
	}
	// Out of the selection, and the last write.
	if _, err := kubetest.PutConfigMap(ctx, cs, ns, "z", 2, map[string]string{"mod3": "0"}); err != nil {
		t.Fatal(err)
	}
	head, err := h.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if head <= from {
		t.Fatalf("head %d after a write, list at %d", head, from)
	}

	type batch struct {
		evs    []driver.Event[*corev1.ConfigMap]
		probes int32
	}
	got := make(chan batch, 16)
	progress := make(chan struct{}, 1)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- r.Watch(wctx, from, driver.WatchOptions[*corev1.ConfigMap]{
			Progress: progress,
			Emit: func(evs []driver.Event[*corev1.ConfigMap]) error {
				select {
				case got <- batch{append([]driver.Event[*corev1.ConfigMap](nil), evs...), client.probes.Load()}:
				case <-wctx.Done():
				}
				return nil
			},
		})
	}()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, driver.ErrWatchStopped) {
			t.Errorf("Watch returned %v, want stopped", err)
		}
	}()
	next := func(what string) batch {
		t.Helper()
		select {
		case b := <-got:
			return b
		case err := <-done:
			t.Fatalf("waiting for %s: the watch ended: %v", what, err)
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (short watches opened: %d)", what, ctx.Err(), client.probes.Load())
		}
		return batch{}
	}

	progress <- struct{}{}
	b := next("the answer to the progress request")
	if len(b.evs) != 1 || b.evs[0].Type != driver.Bookmark {
		t.Fatalf("first emit %v, want one bookmark (nothing the selector matches changed)", b.evs)
	}
	mark := b.evs[0].RV
	if mark < head {
		t.Fatalf("bookmark at %d, want at least the head %d", mark, head)
	}
	if b.probes != 1 {
		t.Errorf("the bookmark came after %d short watches, want 1: the request waited for a write that moves the watch cache", b.probes)
	}

	// The bookmark's claim holds: the next matching change comes after
	// it, and nothing at or below it does.
	cm, err := kubetest.PutConfigMap(ctx, cs, ns, "a", 3, in)
	if err != nil {
		t.Fatal(err)
	}
	rvA := rv(t, cm.ResourceVersion)
	for {
		b := next("the change to a")
		for _, e := range b.evs {
			if e.RV <= mark {
				t.Fatalf("after a bookmark at %d, %v %q at %d arrived", mark, e.Type, e.Key, e.RV)
			}
		}
		e := b.evs[len(b.evs)-1]
		if e.Type == driver.Modified && e.Key == h.EventKey("a") && e.RV == rvA {
			return
		}
	}
}
