package heal_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbinformer/dbinformer/internal/heal"
)

// A server that fails two probes and then answers: Wait returns nil, the
// heal an informer's backoff sleep is cut short on.
func ExampleWait() {
	down := 2
	probe := func(context.Context) error {
		if down > 0 {
			down--
			return errors.New("connection refused")
		}
		return nil
	}
	err := heal.Wait(context.Background(), probe, heal.Options{First: time.Millisecond, Max: time.Millisecond, Timeout: time.Second, What: "the server"})
	fmt.Println(err)
	// Output: <nil>
}

// A server that answers the first probe: no outage (ErrNotDown), unless
// Options.Down says it was down just before (a restart that ended).
func ExampleOptions_down() {
	up := func(context.Context) error { return nil }
	o := heal.Options{First: time.Millisecond, Max: time.Millisecond, Timeout: time.Second, What: "the server"}
	fmt.Println(errors.Is(heal.Wait(context.Background(), up, o), heal.ErrNotDown))
	o.Down = func() bool { return true }
	fmt.Println(heal.Wait(context.Background(), up, o))
	// Output:
	// true
	// <nil>
}
