package kubeinformer_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

func cmVersion(cm *corev1.ConfigMap) int64 {
	n, _ := strconv.ParseInt(cm.Data[kubetest.VersionKey], 10, 64)
	return n
}

// putTagged writes ns/name with a tier label and a note.
func putTagged(ctx context.Context, cs kubernetes.Interface, ns, name string, n int64, tier, note string) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"tier": tier}},
		Data:       map[string]string{kubetest.VersionKey: strconv.FormatInt(n, 10), "note": note},
	}
	api := cs.CoreV1().ConfigMaps(ns)
	_, err := api.Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = api.Update(ctx, cm, metav1.UpdateOptions{})
	}
	return err
}

type cmModel struct {
	held bool
	n    int64
	log  []string
}

func (m *cmModel) write(key string, n int64, in bool) {
	switch {
	case in && m.held:
		m.log = append(m.log, fmt.Sprintf("update %s %d->%d", key, m.n, n))
	case in:
		m.log = append(m.log, fmt.Sprintf("add %s v=%d", key, n))
	case m.held:
		m.log = append(m.log, fmt.Sprintf("delete %s v=%d", key, m.n))
	}
	if in {
		m.n = n
	}
	m.held = in
}

// TestWhereEnterLeave: ConfigMaps move into and out of a filter whose
// label condition is a label selector (the apiserver reports a ConfigMap
// whose label changed as deleted, with its new state) and whose data
// condition is evaluated in the adapter, under concurrent writers. Each
// key's handler log is exactly its enter/leave history, deletes carry the
// last matching state, and the cache equals a list with the selector,
// filtered by the rest.
func TestWhereEnterLeave(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	ns := kubetest.CreateNamespace(t, cs, "where")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := filter.MustNew[*corev1.ConfigMap](filter.And(filter.Eq("metadata.labels.tier", "a"), filter.Eq("data.note", "yes")))
	base, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps(ns), kubeinformer.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	res, err := base.Where(f)
	if err != nil {
		t.Fatal(err)
	}
	if l, fs := res.Selectors(); l != "tier=a" || fs != "" {
		t.Fatalf("selectors %q %q, want the label condition pushed down", l, fs)
	}
	var version atomic.Int64
	const writers, keysPer, ops = 3, 3, 25
	models := map[string]*cmModel{}
	for w := range writers {
		for k := range keysPer {
			models[fmt.Sprintf("%s/w%d-k%d", ns, w, k)] = &cmModel{}
		}
	}
	i := 0
	for _, key := range slices.Sorted(maps.Keys(models)) {
		n := version.Add(1)
		tier, note := []string{"a", "b"}[i%2], []string{"yes", "no"}[(i/2)%2]
		i++
		if err := putTagged(ctx, cs, ns, strings.TrimPrefix(key, ns+"/"), n, tier, note); err != nil {
			t.Fatal(err)
		}
		models[key].write(key, n, tier == "a" && note == "yes")
		for j := range models[key].log {
			models[key].log[j] += " initial"
		}
	}
	rec := informertest.NewRecorder(t, cmVersion)
	inf, _ := informertest.Run[*corev1.ConfigMap](t, res, core.InformerOptions[*corev1.ConfigMap]{}, rec)

	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for range ops {
				name := fmt.Sprintf("w%d-k%d", w, r.IntN(keysPer))
				key := ns + "/" + name
				if r.IntN(6) == 0 {
					if _, err := kubetest.DeleteConfigMap(ctx, cs, ns, name); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					models[key].write(key, 0, false)
					mu.Unlock()
					continue
				}
				n := version.Add(1)
				tier, note := []string{"a", "b"}[r.IntN(2)], []string{"yes", "no"}[r.IntN(2)]
				if err := putTagged(ctx, cs, ns, name, n, tier, note); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				models[key].write(key, n, tier == "a" && note == "yes")
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for key, m := range models {
		rec.Wait(key, func(log []string, _ map[string]int64) bool {
			var got []string
			for _, l := range log {
				if fs := strings.Fields(l); len(fs) > 1 && fs[1] == key {
					got = append(got, l)
				}
			}
			return slices.Equal(got, m.log)
		})
	}
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: "tier=a"})
	if err != nil {
		t.Fatal(err)
	}
	head, err := core.ParseResourceVersion(list.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, head)
	truth := map[string]int64{}
	for i := range list.Items {
		cm := &list.Items[i]
		if f.Match(kubeinformer.Key(cm), cm) {
			truth[kubeinformer.Key(cm)] = cmVersion(cm)
		}
	}
	got := map[string]int64{}
	for _, cm := range inf.Lister().List(nil) {
		got[kubeinformer.Key(cm)] = cmVersion(cm)
	}
	if !maps.Equal(got, truth) {
		t.Fatalf("cache differs from the list with the selector:\n cache %v\n truth %v", got, truth)
	}
}

func TestWhereRefused(t *testing.T) {
	ctx := context.Background()
	res, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, configMapsStandIn{}, kubeinformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = res.Where(filter.MustNew[*corev1.ConfigMap](filter.Server(filter.Prefix("metadata.labels.tier", "a"))))
	if err == nil || !strings.Contains(err.Error(), `cannot evaluate metadata.labels.tier PREFIX "a"`) {
		t.Errorf("a Server prefix on a label: %v", err)
	}
	r2, err := res.Where(filter.MustNew[*corev1.ConfigMap](filter.And(
		filter.In("metadata.labels.tier", "a", "b"), filter.Eq("metadata.name", "x"), filter.Eq("data.k", "v"))))
	if err != nil {
		t.Fatal(err)
	}
	if l, fs := r2.Selectors(); l != "tier in (a,b)" || fs != "metadata.name=x" {
		t.Errorf("selectors %q %q", l, fs)
	}
}
