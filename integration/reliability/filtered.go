package reliability

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/dbinformer/dbinformer/adapters/etcd/etcdtest"
	"github.com/dbinformer/dbinformer/adapters/nats/natstest"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// Partial sync (issue 22): the same workload and faults through a filter,
// so that keys keep entering and leaving it (a version that is a multiple
// of 3 is out, and every write changes the version); the harness's Truth
// reports only what the filter matches, and the handlers' view must equal
// it. etcd-filtered pushes a key range down (keys below "k12") and
// evaluates the predicate in the adapter; nats-filtered evaluates both in
// the adapter; postgres-filtered (keys k00..k11 with In) pushes the key
// condition into the List's query and (with a temporary slot) the
// publication's row filter under REPLICA IDENTITY FULL, and evaluates
// everything in the adapter under DEFAULT (the seed picks);
// kube-filtered pushes a label condition down as a label selector (each
// write labels its ConfigMap with its version modulo 3, so a write moves
// the key in or out on the server's side) and evaluates a name condition
// in the adapter.
func init() {
	Register("kube-filtered", func(t testing.TB, _ *rand.Rand) (conformance.Harness[*corev1.ConfigMap], string) {
		f, err := filter.New[*corev1.ConfigMap](filter.And(
			filter.In("metadata.labels.mod3", "1", "2"),
			filter.Where("name below k12", func(cm *corev1.ConfigMap) bool { return cm.Name < "k12" }),
		))
		if err != nil {
			t.Fatal(err)
		}
		h := kubetest.NewConfigMaps(t, harness.StartKube(t), kubetest.Options{
			Where:  f,
			Labels: func(n int64) map[string]string { return map[string]string{"mod3": strconv.FormatInt(n%3, 10)} },
		})
		return h, fmt.Sprintf("kube-apiserver + etcd, ConfigMaps of one namespace, filter %s", f)
	})
	Register("postgres-filtered", func(t testing.TB, rnd *rand.Rand) (conformance.Harness[pgtest.Row], string) {
		var keys []any
		for i := range 12 {
			keys = append(keys, fmt.Sprintf("k%02d", i))
		}
		f, err := filter.New[pgtest.Row](filter.And(
			filter.In("k", keys...),
			filter.Where("version not a multiple of 3", func(r pgtest.Row) bool { return r.V%3 != 0 }),
		))
		if err != nil {
			t.Fatal(err)
		}
		srv := harness.StartPostgres(t)
		opts := pgtest.Options{Proxy: true, Table: "reliability", Where: f}
		variant := "identity default (filter in the adapter)"
		if rnd.IntN(2) == 0 {
			opts.Full, variant = true, "identity full (key condition in the query and the row filter)"
		}
		if rnd.IntN(2) == 0 {
			opts.Slot = "reliability_slot"
			variant += ", permanent slot"
			if opts.Full {
				variant = "identity full (key condition in the query, no row filter: permanent slot)"
			}
		}
		return pgtest.New(t, srv, opts), variant
	})
	Register("etcd-filtered", func(t testing.TB, _ *rand.Rand) (conformance.Harness[etcdtest.Item], string) {
		f, err := filter.New[etcdtest.Item](filter.And(
			filter.Lt(filter.Key, "k12"),
			filter.Where("version not a multiple of 3", func(it etcdtest.Item) bool { return it.Version%3 != 0 }),
		))
		if err != nil {
			t.Fatal(err)
		}
		srv := harness.StartEtcd(t)
		return etcdtest.New(t, srv, etcdtest.Options{Prefix: "/reliability/", Faults: true, Where: f}), fmt.Sprintf("embedded etcd, filter %s", f)
	})
	Register("nats-filtered", func(t testing.TB, rnd *rand.Rand) (conformance.Harness[natstest.Obj], string) {
		f, err := filter.New[natstest.Obj](filter.And(
			filter.Lt(filter.Key, "k12"),
			filter.Where("version not a multiple of 3", func(o natstest.Obj) bool { return o.V%3 != 0 }),
		))
		if err != nil {
			t.Fatal(err)
		}
		history := uint8(1 + 4*rnd.IntN(2))
		h := natstest.NewKV(t, natstest.Config{Server: harness.StartNATS(t), History: history, Proxy: true, KVWhere: f})
		return h, fmt.Sprintf("KV history %d, filter %s", history, f)
	})
}
