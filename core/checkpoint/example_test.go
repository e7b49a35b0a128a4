package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/dbinformer/dbinformer/core/checkpoint"
)

// A DirStore keeps each checkpoint as one file, replaced atomically by
// each Save; Load of a name never saved reports ErrNotFound, after which
// an informer lists as on a cold start.
func ExampleDirStore() {
	dir, err := os.MkdirTemp("", "checkpoints")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := store.Load(ctx, "users"); errors.Is(err, checkpoint.ErrNotFound) {
		fmt.Println("no checkpoint yet")
	}
	err = store.Save(ctx, "users", func(w io.Writer) error {
		_, err := io.WriteString(w, "the informer's encoding")
		return err
	})
	if err != nil {
		panic(err)
	}
	rc, err := store.Load(ctx, "users")
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	fmt.Printf("%s\n", b)
	// Output:
	// no checkpoint yet
	// the informer's encoding
}
