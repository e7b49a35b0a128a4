package reliability

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/dbinformer/dbinformer/core/conformance"
)

// Adapter is a registered harness constructor with its type erased, so
// that adapters of different object types run in one list.
type Adapter struct {
	Name string
	// Run runs one seed (reliability.Run with the registered MakeHarness).
	Run func(t testing.TB, seed uint64, cfg Config) Result
}

var registry = struct {
	sync.Mutex
	m map[string]Adapter
}{m: map[string]Adapter{}}

// Register makes an adapter's harness known to TestReliability under name
// (etcd, postgres, nats, kube). Each adapter's file in this package calls
// it from init, so that adding an adapter touches one file. Registering a
// name twice panics.
func Register[T any](name string, makeHarness MakeHarness[T]) {
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.m[name]; dup {
		panic(fmt.Sprintf("reliability: adapter %q registered twice", name))
	}
	registry.m[name] = Adapter{Name: name, Run: func(t testing.TB, seed uint64, cfg Config) Result {
		t.Helper()
		return Run(t, name, makeHarness, seed, cfg)
	}}
}

// Adapters returns every registered adapter, by name.
func Adapters() []Adapter {
	registry.Lock()
	defer registry.Unlock()
	out := make([]Adapter, 0, len(registry.m))
	for _, name := range slices.Sorted(maps.Keys(registry.m)) {
		out = append(out, registry.m[name])
	}
	return out
}

// Lookup returns the adapter registered under name.
func Lookup(name string) (Adapter, bool) {
	registry.Lock()
	defer registry.Unlock()
	a, ok := registry.m[name]
	return a, ok
}

var _ MakeHarness[int] = func(testing.TB, *rand.Rand) (conformance.Harness[int], string) { return nil, "" }
