package core

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"weak"

	codecs "github.com/dbinformer/dbinformer/core/codec"
)

// loadedBase encodes rows as a checkpoint with the Binary codec and
// decodes it, lazily or not, into an item table whose base is the
// checkpoint's pages.
func loadedBase(t *testing.T, keys []string, objs []ckptRow, lazy bool) items[ckptRow] {
	t.Helper()
	codec, err := codecs.NewBinary[ckptRow]()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := encodeCheckpoint(&buf, codec, "x", 7, keys, objs, nil); err != nil {
		t.Fatal(err)
	}
	_, l, err := decodeCheckpoint(&buf, codec, "x", lazy, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.lazy() != lazy {
		t.Fatalf("loaded lazily: %v, want %v", l.lazy(), lazy)
	}
	return items[ckptRow]{m: map[string]ckptRow{}, base: l.base}
}

// checkItems fails unless t holds exactly model, and its base keeps the
// invariants: at most a quarter dead, and a page on its checkpoint block
// has fewer than a quarter of its objects moved.
func checkItems(t *testing.T, it *items[ckptRow], model map[string]ckptRow) {
	t.Helper()
	if it.len() != len(model) {
		t.Fatalf("len %d, want %d", it.len(), len(model))
	}
	for k, want := range model {
		if got, ok := it.get(k); !ok || got != want {
			t.Fatalf("get(%s) = %v, %v; want %v", k, got, ok, want)
		}
	}
	if got := maps.Collect(it.all); !maps.Equal(got, model) {
		t.Fatalf("walk has %d keys, want %d (or different objects)", len(got), len(model))
	}
	if b := it.base; b != nil {
		if b.dead*4 > b.n {
			t.Fatalf("base %d of %d dead, more than a quarter", b.dead, b.n)
		}
		for _, p := range b.pages {
			if p.block != nil && p.moved*4 >= p.n {
				t.Fatalf("a page with %d of %d objects moved is still on its block", p.moved, p.n)
			}
		}
	}
}

// A table loaded from a checkpoint answers as a map with the same writes
// does, through random puts, swaps and deletes of loaded and new keys, as
// its pages move off their blocks and it compacts.
func TestItemsFromCheckpointMatchModel(t *testing.T) {
	for _, lazy := range []bool{true, false} {
		t.Run("lazy="+strconv.FormatBool(lazy), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(39, 2))
			const n = 3000
			keys, objs := ckptRows(n)
			it := loadedBase(t, keys, objs, lazy)
			model := map[string]ckptRow{}
			for i, k := range keys {
				model[k] = objs[i]
			}
			checkItems(t, &it, model)
			compactions := 0
			for op := range 12_000 {
				k := strconv.Itoa(1 + rng.IntN(n*3/2)) // a third new keys
				o := ckptRow{ID: int64(op), Org: "o" + strconv.Itoa(op), N: int32(op)}
				base := it.base
				switch rng.IntN(3) {
				case 0:
					it.set(k, o)
					model[k] = o
				case 1:
					old, existed := it.swap(k, o)
					if want, ok := model[k]; existed != ok || old != want {
						t.Fatalf("swap(%s) = %v, %v; want %v, %v", k, old, existed, want, ok)
					}
					model[k] = o
				case 2:
					it.del(k)
					delete(model, k)
				}
				if it.base != base {
					compactions++
				}
				if op%500 == 0 {
					checkItems(t, &it, model)
				}
			}
			checkItems(t, &it, model)
			if compactions == 0 {
				t.Error("the table never compacted")
			}
		})
	}
}

// Once every object of a base loaded from a checkpoint has been written,
// the checkpoint's blocks are garbage: no key and no object of the table
// shares them. Before, the table keeps them (or the test could not tell).
func TestItemsReleaseCheckpointBlocks(t *testing.T) {
	for _, lazy := range []bool{true, false} {
		t.Run("lazy="+strconv.FormatBool(lazy), func(t *testing.T) {
			const n = 20_000 // a few 1 MiB blocks
			keys, objs := ckptRows(n)
			it := loadedBase(t, keys, objs, lazy)
			var blocks []weak.Pointer[byte]
			for _, p := range it.base.pages {
				if p.block == nil {
					t.Fatal("a page of a checkpoint decoded with Binary shares no block")
				}
				blocks = append(blocks, weak.Make(&p.block.data[0]))
			}
			live := func() int {
				runtime.GC()
				c := 0
				for _, w := range blocks {
					if w.Value() != nil {
						c++
					}
				}
				return c
			}
			// Read everything (decoding lazy pages) and write a fifth of
			// the keys: every page stays on its block.
			for i := range n {
				if _, ok := it.get(keys[i]); !ok {
					t.Fatalf("%s missing", keys[i])
				}
			}
			for i := 0; i < n; i += 5 {
				it.set(keys[i], ckptRow{ID: int64(i), Note: "new " + keys[i]})
			}
			if live() != len(blocks) {
				t.Fatalf("%d of %d pages' blocks live while the base holds them", live(), len(blocks))
			}
			for i := range n {
				it.set(keys[i], ckptRow{ID: int64(i), Note: "new " + keys[i]})
			}
			if c := live(); c != 0 {
				t.Errorf("%d of %d pages' blocks live after every object was written", c, len(blocks))
			}
			for i := range n {
				if o, ok := it.get(keys[i]); !ok || o.Note != "new "+keys[i] {
					t.Fatalf("get(%s) = %v, %v", keys[i], o, ok)
				}
			}
		})
	}
}

// A page moved off its block keeps the objects it had loaded, now in
// strings of their own: with a few objects written (a quarter of each
// page), the rest still read as loaded, and the blocks go.
func TestItemsUnpinKeepsLoadedObjects(t *testing.T) {
	const n = 4096
	keys, objs := ckptRows(n)
	it := loadedBase(t, keys, objs, true)
	model := map[string]ckptRow{}
	for i, k := range keys {
		model[k] = objs[i]
	}
	var blocks []weak.Pointer[byte]
	for _, p := range it.base.pages {
		blocks = append(blocks, weak.Make(&p.block.data[0]))
	}
	for i := 0; i < n; i += 4 {
		o := ckptRow{ID: int64(i), Note: "written"}
		it.set(keys[i], o)
		model[keys[i]] = o
	}
	for _, p := range it.base.pages {
		if p.block != nil {
			t.Fatalf("a page with %d of %d objects written is still on its block", p.moved, p.n)
		}
	}
	runtime.GC()
	for _, w := range blocks {
		if w.Value() != nil {
			t.Fatal("a block is live after every page moved off it")
		}
	}
	checkItems(t, &it, model)
}

// An Indexer loaded from a checkpoint, with an index, lets the blocks go
// once every object was written with the same index values: neither its
// key table nor its index values share them.
func TestIndexerLoadedReleasesBlocks(t *testing.T) {
	const n = 20_000
	keys, objs := ckptRows(n)
	it := loadedBase(t, keys, objs, false)
	s := NewIndexer(Indexers[ckptRow]{"org": func(o ckptRow) ([]string, error) { return []string{o.Org}, nil }})
	var blocks []weak.Pointer[byte]
	for _, p := range it.base.pages {
		blocks = append(blocks, weak.Make(&p.block.data[0]))
	}
	if ok, skipped := s.loadEmpty(it.base); !ok || len(skipped) > 0 {
		t.Fatalf("loadEmpty: %v, %v", ok, skipped)
	}
	it = items[ckptRow]{}
	for i, k := range keys {
		o := objs[i]
		o.Org, o.Note = "org-"+strconv.Itoa(i%100), "new"
		if err := s.Add(k, o); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	for _, w := range blocks {
		if w.Value() != nil {
			t.Fatal("a block is live after every object was written")
		}
	}
	if got, err := s.ByIndex("org", "org-7"); err != nil || len(got) != n/100 {
		t.Errorf("ByIndex(org-7): %d objects, %v; want %d", len(got), err, n/100)
	}
}

// Indexes added after a lazy load keep no key or value that shares the
// checkpoint's blocks.
func TestIndexerAddIndexersAfterLazyLoadReleasesBlocks(t *testing.T) {
	const n = 20_000
	keys, objs := ckptRows(n)
	it := loadedBase(t, keys, objs, true)
	s := NewIndexer[ckptRow](nil)
	var blocks []weak.Pointer[byte]
	for _, p := range it.base.pages {
		blocks = append(blocks, weak.Make(&p.block.data[0]))
	}
	if ok, _ := s.loadEmpty(it.base); !ok {
		t.Fatal("loadEmpty refused an empty indexer")
	}
	it = items[ckptRow]{}
	if err := s.AddIndexers(Indexers[ckptRow]{"org": func(o ckptRow) ([]string, error) { return []string{o.Org}, nil }}); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		o := objs[i]
		o.Org = "org-" + strconv.Itoa(i%100)
		if err := s.Add(k, o); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	for _, w := range blocks {
		if w.Value() != nil {
			t.Fatal("a block is live after every object was written")
		}
	}
	if got, err := s.ByIndex("org", "org-7"); err != nil || len(got) != n/100 {
		t.Errorf("ByIndex(org-7): %d objects, %v; want %d", len(got), err, n/100)
	}
}

// An object whose values fill in a change (Event.Fill keeps parts of the
// cached object in the next state) is read with strings of its own: once
// every object was replaced by a filled one, no block is live, though each
// new object holds the old one's Note.
func TestItemsOwnedReadsReleaseBlocks(t *testing.T) {
	const n = 20_000
	keys, objs := ckptRows(n)
	it := loadedBase(t, keys, objs, true)
	var blocks []weak.Pointer[byte]
	for _, p := range it.base.pages {
		blocks = append(blocks, weak.Make(&p.block.data[0]))
	}
	for i := range n {
		cached, ok := it.getOwned(keys[i])
		if !ok || cached != objs[i] {
			t.Fatalf("getOwned(%s) = %v, %v; want %v", keys[i], cached, ok, objs[i])
		}
		it.set(keys[i], ckptRow{ID: cached.ID + 1, Note: cached.Note}) // the fill: Note kept
	}
	runtime.GC()
	for _, w := range blocks {
		if w.Value() != nil {
			t.Fatal("a block is live after every object was replaced by one filled from an owned read")
		}
	}
	for i := range n {
		if o, _ := it.get(keys[i]); o.Note != objs[i].Note {
			t.Fatalf("get(%s).Note = %q, want %q", keys[i], o.Note, objs[i].Note)
		}
	}
}

// A checkpoint written from a lazily loaded Indexer (as encodeCache reads
// it: keysNow, then getAll a chunk at a time) leaves the pages lazy: it
// decodes each object for the write alone. Decoding the pages for it kept
// every page decoded, and, the decoded strings sharing the checkpoint's
// blocks, every block alive beside them, for the rest of the run. The
// checkpoint written is the one loaded, byte for byte.
func TestCheckpointWriteLeavesLazyPagesLazy(t *testing.T) {
	const n = 20_000
	keys, objs := ckptRows(n)
	codec, err := codecs.NewBinary[ckptRow]()
	if err != nil {
		t.Fatal(err)
	}
	var loaded bytes.Buffer
	if err := encodeCheckpoint(&loaded, codec, "x", 7, keys, objs, nil); err != nil {
		t.Fatal(err)
	}
	_, l, err := decodeCheckpoint(bytes.NewReader(loaded.Bytes()), codec, "x", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := NewIndexer[ckptRow](nil)
	if ok, _ := s.loadEmpty(l.base); !ok {
		t.Fatal("loadEmpty refused an empty indexer")
	}
	ks, where, base := s.keysNow()
	var saved bytes.Buffer
	err = encodeCheckpointOf(&saved, codec, "x", 7, ks, func(lo int, keys []string, dst []ckptRow) error {
		if !s.getAll(keys, where[lo:lo+len(keys)], base, dst, nil) {
			return errKeyGone
		}
		return nil
	}, func() (map[string]ResourceVersion, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range l.base.pages {
		if p.objs.Load() != nil {
			t.Fatalf("page %d of %d was decoded (and kept) by the checkpoint's write", i, len(l.base.pages))
		}
	}
	if !bytes.Equal(saved.Bytes(), loaded.Bytes()) {
		t.Errorf("the checkpoint written from the lazily loaded cache (%d bytes) differs from the one loaded (%d bytes)", saved.Len(), loaded.Len())
	}
}
