package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Store keeps named checkpoints (see core.CheckpointOptions). The
// informer encodes a checkpoint itself (a format version, the version the
// content is consistent at, the objects, a checksum) and streams it through
// Save; a store only has to keep the bytes, atomically: Load returns the
// last checkpoint whose Save returned nil, whole, or ErrNotFound, never
// a mix of two or a part of one. A store must be safe for concurrent use by
// different names; one name is written by one informer at a time.
type Store interface {
	// Save calls write with a writer for the new checkpoint's bytes and,
	// when write returns nil, makes them durable and the checkpoint that
	// Load returns. When write fails or ctx ends, the previous checkpoint
	// stays, and Save returns an error that matches write's (errors.Is):
	// the informer tells a write it may retry from one that failed.
	Save(ctx context.Context, name string, write func(w io.Writer) error) error
	// Load opens the last saved checkpoint of name, or returns an error
	// matching ErrNotFound when there is none.
	Load(ctx context.Context, name string) (io.ReadCloser, error)
}

// ErrNotFound is matched by Store.Load's error when no
// checkpoint of that name was ever saved: the informer lists as usual.
var ErrNotFound = errors.New("dbinformer: no checkpoint")

// DirStore keeps each checkpoint in one file, <dir>/<name>.ckpt.
// A Save writes a temporary file in dir, fsyncs it, renames it over the
// previous checkpoint and fsyncs the directory, so that a crash at any
// instant (a kill -9 during a Save included) leaves the last complete
// checkpoint. Checkpoints hold user data: the directory is created with
// mode 0700 and the files with mode 0600.
type DirStore struct {
	dir string
}

// NewDirStore returns a store in dir, creating it (mode 0700)
// when it does not exist.
func NewDirStore(dir string) (*DirStore, error) {
	if dir == "" {
		return nil, errors.New("dbinformer: checkpoint directory: empty path (give the directory to keep checkpoints in)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dbinformer: checkpoint directory %q: %w", dir, err)
	}
	return &DirStore{dir: dir}, nil
}

// Dir returns the store's directory.
func (s *DirStore) Dir() string { return s.dir }

// CheckName refuses a name that is not a plain file name: it would write
// outside the directory, or collide with the temporary files. The informer
// checks its checkpoint's name with it before it runs, so that a store may
// use a name as a file name.
func CheckName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`+"\x00") {
		return fmt.Errorf("dbinformer: checkpoint name %q is not a plain file name (set InformerOptions.Name or CheckpointOptions.Name to letters, digits, '.', '-' or '_')", name)
	}
	return nil
}

// Path returns the file of the checkpoint called name.
func (s *DirStore) Path(name string) string {
	return filepath.Join(s.dir, name+".ckpt")
}

// Save implements Store.
func (s *DirStore) Save(ctx context.Context, name string, write func(w io.Writer) error) (err error) {
	if err := CheckName(name); err != nil {
		return err
	}
	// os.CreateTemp creates the file with mode 0600.
	f, err := os.CreateTemp(s.dir, name+".ckpt.tmp*")
	if err != nil {
		return fmt.Errorf("dbinformer: checkpoint %q: %w", name, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if err = ctx.Err(); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("dbinformer: checkpoint %q: fsync: %w", name, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("dbinformer: checkpoint %q: %w", name, err)
	}
	if err = os.Rename(tmp, s.Path(name)); err != nil {
		return fmt.Errorf("dbinformer: checkpoint %q: %w", name, err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("dbinformer: checkpoint %q: fsync directory %q: %w", name, s.dir, err)
	}
	return nil
}

// Load implements Store.
func (s *DirStore) Load(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	// Temporary files left by a crash during a Save are never loaded;
	// remove them.
	if old, _ := filepath.Glob(filepath.Join(s.dir, name+".ckpt.tmp*")); len(old) > 0 {
		for _, p := range old {
			os.Remove(p)
		}
	}
	f, err := os.Open(s.Path(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w %q in %q", ErrNotFound, name, s.dir)
	}
	if err != nil {
		return nil, fmt.Errorf("dbinformer: checkpoint %q: %w", name, err)
	}
	return f, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

var _ Store = (*DirStore)(nil)
