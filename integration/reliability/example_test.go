package reliability_test

import (
	"fmt"

	"github.com/dbinformer/dbinformer/integration/reliability"
)

// Example shows the model check: a History records what one handler saw,
// flags a key whose version went backwards, and compares the handler's
// final view with the source.
func Example() {
	h := reliability.NewHistory()
	h.Saw("a", 1)
	h.Saw("b", 2)
	h.Saw("a", 3)
	h.Deleted("b", 2)
	h.Saw("a", 1) // a stale update: backwards

	fmt.Println(h.Violations())
	fmt.Println(h.Diff(map[string]int64{"a": 3, "c": 4}))
	// Output:
	// [key "a" went backwards: saw version 1 after 3]
	// [handler holds "a" at version 1; the source has version 3 handler lacks "c"; the source has version 4]
}
