package bench_test

import (
	"fmt"

	"github.com/dbinformer/dbinformer/bench"
	"github.com/dbinformer/dbinformer/core"
)

// The pipeline benchmark feeds this stream to both informers.
func ExampleChanges() {
	count := map[core.EventType]int{}
	for _, c := range bench.Changes(1000, 100, 1) {
		count[c.Type]++
	}
	fmt.Println(count[core.Added]+count[core.Modified]+count[core.Deleted], count[core.Added] >= 100)
	// Output: 1000 true
}
