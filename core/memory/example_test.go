package memory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
)

type user struct{ Name string }

func Example() {
	ctx := context.Background()
	src := memory.New[user](memory.Options{})
	src.Put("u1", user{"ada"})
	src.Put("u2", user{"bob"})

	// List, then watch from the List's version, as a Reflector does.
	rv, _ := src.List(ctx, core.ListOptions[user]{Emit: func(ev core.Event[user]) error {
		fmt.Println("listed", ev.Key, ev.Object.Name)
		return nil
	}})
	w, _ := src.Watch(ctx, rv)
	defer w.Stop()

	// Two keys in one transaction share a version and arrive in one batch.
	src.Apply(memory.PutOp("u1", user{"ada lovelace"}), memory.DeleteOp[user]("u2"))
	batch, _ := w.Next(ctx)
	for _, ev := range batch {
		fmt.Println(ev.Type, ev.Key, ev.Object.Name, "at", ev.RV)
	}

	// Compaction makes old versions unwatchable: the caller must relist.
	src.Compact(src.HeadRV())
	_, err := src.Watch(ctx, rv)
	fmt.Println("expired:", errors.Is(err, core.ErrExpired))
	// Output:
	// listed u1 ada
	// listed u2 bob
	// Modified u1 ada lovelace at 3
	// Deleted u2 bob at 3
	// expired: true
}

// A version that touched no watched key is reached with a progress request.
func ExampleSource_Advance() {
	ctx := context.Background()
	src := memory.New[user](memory.Options{})
	w, _ := src.Watch(ctx, src.HeadRV())
	defer w.Stop()

	rv := src.Advance() // a write to another table
	w.(core.ProgressRequester).RequestProgress(ctx)
	batch, _ := w.Next(ctx)
	fmt.Println(batch[0].Type, batch[0].RV == rv)
	// Output:
	// Bookmark true
}

// Fault hooks make a source misbehave the way a database does, for testing
// the code that consumes it.
func ExampleSource_BreakWatchers() {
	ctx := context.Background()
	src := memory.New[user](memory.Options{})
	w, _ := src.Watch(ctx, 0)
	defer w.Stop()

	src.Put("u1", user{"ada"})
	src.BreakWatchers(errors.New("connection reset"))
	_, err := w.Next(ctx)
	fmt.Println(err)
	// Output:
	// connection reset
}
