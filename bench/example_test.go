package bench_test

import (
	"fmt"

	"github.com/dbinformer/dbinformer/bench"
	"github.com/dbinformer/dbinformer/core/driver"
)

// The pipeline benchmark feeds this stream to both informers.
func ExampleChanges() {
	count := map[driver.EventType]int{}
	for _, c := range bench.Changes(1000, 100, 1) {
		count[c.Type]++
	}
	fmt.Println(count[driver.Added]+count[driver.Modified]+count[driver.Deleted], count[driver.Added] >= 100)
	// Output: 1000 true
}
