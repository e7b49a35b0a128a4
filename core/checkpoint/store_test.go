package checkpoint_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core/checkpoint"
)

// A Save whose write fails (a crash during a write is the same on disk:
// a temporary file) leaves the previous checkpoint loadable.
func TestDirStoreFailedSaveKeepsPrevious(t *testing.T) {
	store, err := checkpoint.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Save(ctx, "x", func(w io.Writer) error { _, err := w.Write([]byte("one")); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := store.Save(ctx, "x", func(w io.Writer) error { w.Write([]byte("tw")); return boom }); !errors.Is(err, boom) {
		t.Fatalf("Save: %v, want boom", err)
	}
	// A temporary file as a kill -9 during a Save leaves it.
	if err := os.WriteFile(filepath.Join(store.Dir(), "x.ckpt.tmp123"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := store.Load(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "one" {
		t.Errorf("loaded %q, want the previous checkpoint", b)
	}
	left, _ := filepath.Glob(filepath.Join(store.Dir(), "*"))
	if !slices.Equal(left, []string{store.Path("x")}) {
		t.Errorf("files left: %v", left)
	}
	if _, err := store.Load(ctx, "y"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Load of a missing checkpoint: %v, want ErrNotFound", err)
	}
	if err := store.Save(ctx, "../escape", func(io.Writer) error { return nil }); err == nil || !strings.Contains(err.Error(), "plain file name") {
		t.Errorf("Save of a path-like name: %v", err)
	}
}
