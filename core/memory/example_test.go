package memory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/memory"
)

type user struct{ Name string }

func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := memory.New[user](memory.Options{})
	src.Put("u1", user{"ada"})
	src.Put("u2", user{"bob"})

	// List, then watch from the List's version, as a Reflector does.
	rv, _ := src.List(ctx, driver.ListSink[user]{Emit: func(ev driver.Event[user]) error {
		fmt.Println("listed", ev.Key, ev.Object.Name)
		return nil
	}})

	// Two keys in one transaction share a version and arrive in one batch.
	src.Apply(memory.PutOp("u1", user{"ada lovelace"}), memory.DeleteOp[user]("u2"))
	err := src.Watch(ctx, rv, driver.WatchOptions[user]{Emit: func(batch []driver.Event[user]) error {
		for _, ev := range batch {
			fmt.Println(ev.Type, ev.Key, ev.Object.Name, "at", ev.RV)
		}
		cancel() // seen enough: the watch ends with ErrWatchStopped
		return nil
	}})
	fmt.Println("stopped:", errors.Is(err, driver.ErrWatchStopped))

	// Compaction makes old versions unwatchable: the caller must relist.
	src.Compact(src.HeadRV())
	err = src.Watch(context.Background(), rv, driver.WatchOptions[user]{Emit: func([]driver.Event[user]) error { return nil }})
	fmt.Println("expired:", errors.Is(err, driver.ErrExpired))
	// Output:
	// listed u1 ada
	// listed u2 bob
	// Modified u1 ada lovelace at 3
	// Deleted u2 bob at 3
	// stopped: true
	// expired: true
}

// A version that touched no watched key is reached with a progress request.
func ExampleSource_Advance() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := memory.New[user](memory.Options{})
	from := src.HeadRV()
	rv := src.Advance() // a write to another table

	progress := make(chan struct{}, 1)
	progress <- struct{}{} // ask for a bookmark
	src.Watch(ctx, from, driver.WatchOptions[user]{
		Emit: func(batch []driver.Event[user]) error {
			fmt.Println(batch[0].Type, batch[0].RV == rv)
			cancel()
			return nil
		},
		Progress: progress,
	})
	// Output:
	// Bookmark true
}

// InjectDecodeError puts a change the adapter could not decode into the
// history, as a value written by another program would be.
func ExampleSource_InjectDecodeError() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := memory.New[user](memory.Options{Name: "users"})
	src.InjectDecodeError("u1", errors.New("invalid character 'x'"))
	src.Watch(ctx, 0, driver.WatchOptions[user]{Emit: func(batch []driver.Event[user]) error {
		fmt.Println(batch[0].Type, batch[0].Key, batch[0].Err)
		cancel()
		return nil
	}})
	// Output:
	// Added u1 users: key "u1" at version 1: invalid character 'x'
}
