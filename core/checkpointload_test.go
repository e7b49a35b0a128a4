package core

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core/codec"
)

// loadEmpty builds the same cache, indexes included, as adding the objects
// one by one; an object whose index function fails is left out.
func TestIndexerLoadEmptyMatchesAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 1))
	type obj struct {
		Groups []string
		Owner  string
	}
	bad := errors.New("bad object")
	indexers := Indexers[obj]{
		"group": func(o obj) ([]string, error) { return o.Groups, nil },
		"owner": func(o obj) ([]string, error) {
			if o.Owner == "fail" {
				return nil, bad
			}
			if o.Owner == "" {
				return nil, nil
			}
			return []string{o.Owner}, nil
		},
	}
	var keys []string
	var objs []obj
	for i := range 3000 {
		o := obj{Owner: fmt.Sprintf("u%d", rng.IntN(50))}
		switch rng.IntN(20) {
		case 0:
			o.Owner = ""
		case 1:
			o.Owner = "fail"
		}
		for range rng.IntN(4) {
			o.Groups = append(o.Groups, fmt.Sprintf("g%d", rng.IntN(30)))
		}
		keys, objs = append(keys, fmt.Sprintf("k%d", i)), append(objs, o)
	}
	want := NewIndexer(indexers)
	wantSkipped := 0
	for i := range keys {
		if err := want.Add(keys[i], objs[i]); err != nil {
			wantSkipped++
		}
	}
	got := NewIndexer(indexers)
	ok, skipped := got.loadEmpty(mustBase(t, keys, objs, 4))
	if !ok {
		t.Fatal("loadEmpty refused an empty indexer")
	}
	if len(skipped) != wantSkipped {
		t.Errorf("skipped %d objects, want %d", len(skipped), wantSkipped)
	}
	for k, err := range skipped {
		var ie *IndexError
		if !errors.As(err, &ie) || ie.Key != k || ie.Index != "owner" || !errors.Is(err, bad) {
			t.Errorf("skipped %s: %v", k, err)
		}
	}
	if g, w := got.Len(), want.Len(); g != w {
		t.Fatalf("%d keys, want %d", g, w)
	}
	for _, name := range []string{"group", "owner"} {
		gv, wv := got.ListIndexFuncValues(name), want.ListIndexFuncValues(name)
		if !slices.Equal(gv, wv) {
			t.Fatalf("index %s values %v, want %v", name, gv, wv)
		}
		for _, v := range wv {
			gk, _ := got.IndexKeys(name, v)
			wk, _ := want.IndexKeys(name, v)
			if !slices.Equal(gk, wk) {
				t.Fatalf("index %s value %s: keys %v, want %v", name, v, gk, wk)
			}
		}
	}
	// The loaded indexer takes later writes like any other.
	for i := range 500 {
		k := keys[rng.IntN(len(keys))]
		o := obj{Owner: fmt.Sprintf("u%d", i%7), Groups: []string{"g1"}}
		if i%3 == 0 {
			got.Delete(k)
			want.Delete(k)
			continue
		}
		got.Add(k, o)
		want.Add(k, o)
	}
	for _, v := range want.ListIndexFuncValues("owner") {
		gk, _ := got.IndexKeys("owner", v)
		wk, _ := want.IndexKeys("owner", v)
		if !slices.Equal(gk, wk) {
			t.Fatalf("after writes, owner %s: keys %v, want %v", v, gk, wk)
		}
	}

	// Not empty: nothing changes.
	if ok, _ := got.loadEmpty(mustBase(t, []string{"new"}, []obj{{}}, 4)); ok {
		t.Error("loadEmpty loaded into a non-empty indexer")
	}
	if _, ok := got.Get("new"); ok {
		t.Error("a refused load changed the indexer")
	}
}

// A checkpoint written with one codec is refused by another, before any
// object is decoded, and a checkpoint round-trips through the chunked
// format with either codec.
func TestCheckpointFormatCodecs(t *testing.T) {
	keys, objs := ckptRows(2*checkpointChunk + 3)
	bin, err := codec.NewBinary[ckptRow]()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []codec.Codec[ckptRow]{codec.JSON[ckptRow]{}, bin} {
		var buf bytes.Buffer
		if err := encodeCheckpoint(&buf, c, "x", 9, keys, objs, nil); err != nil {
			t.Fatal(err)
		}
		for _, lazy := range []bool{false, true} {
			rv, l, err := decodeCheckpoint(bytes.NewReader(buf.Bytes()), c, "x", lazy, nil)
			if err != nil || rv != 9 || l.n != len(keys) {
				t.Fatalf("%T: rv %d, %v objects, %v", c, rv, l, err)
			}
			decoded := 0
			for _, p := range l.parts {
				if p.page.objs.Load() != nil {
					decoded++
				}
			}
			// Only Binary decodes lazily: JSON may refuse what it wrote.
			want := len(l.parts)
			if lazy && c == codec.Codec[ckptRow](bin) {
				want = 0
			}
			if decoded != want {
				t.Errorf("%T lazy=%v: %d of %d pages decoded", c, lazy, decoded, want)
			}
			n := 0
			for k, o := range l.all {
				if k != keys[n] || o != objs[n] {
					t.Fatalf("%T: object %d: %s %+v, want %s %+v", c, n, k, o, keys[n], objs[n])
				}
				n++
			}
			for k, key := range keys {
				if pos, ok := l.base.find(key); !ok || *l.base.obj(pos) != objs[k] {
					t.Fatalf("%T: base find(%s) = %d, %v", c, key, pos, ok)
				}
			}
		}
		var other codec.Codec[ckptRow] = bin
		if c == other {
			other = codec.JSON[ckptRow]{}
		}
		if _, _, err := decodeCheckpoint(bytes.NewReader(buf.Bytes()), other, "x", true, nil); err == nil || !strings.Contains(err.Error(), "written with codec") {
			t.Errorf("%T checkpoint read with %T: %v, want a codec mismatch", c, other, err)
		}
	}
}

// A checkpoint read from a file loads, eagerly or lazily, and a repeated
// key is refused.
func TestCheckpointFromFile(t *testing.T) {
	keys, objs := ckptRows(3*checkpointChunk + 7)
	bin, err := codec.NewBinary[ckptRow]()
	if err != nil {
		t.Fatal(err)
	}
	load := func(keys []string, lazy bool) (*loaded[ckptRow], error) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "c")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := encodeCheckpoint(f, codec.Codec[ckptRow](bin), "x", 3, keys, objs[:len(keys)], nil); err != nil {
			t.Fatal(err)
		}
		f.Close()
		f, err = os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, l, err := decodeCheckpoint(f, codec.Codec[ckptRow](bin), "x", lazy, nil)
		return l, err
	}
	for _, lazy := range []bool{false, true} {
		l, err := load(keys, lazy)
		if err != nil {
			t.Fatal(err)
		}
		for k, key := range keys {
			if pos, ok := l.base.find(key); !ok || *l.base.obj(pos) != objs[k] {
				t.Fatalf("lazy=%v: find(%s) = %d, %v", lazy, key, pos, ok)
			}
		}
		dup := slices.Clone(keys)
		dup[len(dup)-1] = dup[5]
		if _, err := load(dup, lazy); err == nil || !strings.Contains(err.Error(), "twice") {
			t.Errorf("lazy=%v: a repeated key: %v", lazy, err)
		}
	}
}

// A checkpoint says which objects it holds in a state later than its
// version; one of format 2, written before it could, loads with none.
func TestCheckpointLaterStates(t *testing.T) {
	keys, objs := ckptRows(checkpointChunk + 3)
	later := map[string]ResourceVersion{keys[1]: 12, keys[checkpointChunk+2]: 15}
	var buf bytes.Buffer
	if err := encodeCheckpoint(&buf, codec.JSON[ckptRow]{}, "x", 9, keys, objs, later); err != nil {
		t.Fatal(err)
	}
	_, l, err := decodeCheckpoint(bytes.NewReader(buf.Bytes()), codec.JSON[ckptRow]{}, "x", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(l.later, later) {
		t.Errorf("later states %v, want %v", l.later, later)
	}

	// Format 2: no section (its count, one byte when empty, goes), the
	// format number and the checksum of what is left.
	buf.Reset()
	if err := encodeCheckpoint(&buf, codec.JSON[ckptRow]{}, "x", 9, keys, objs, nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	end := bytes.LastIndex(b, []byte(checkpointEnd))
	if b[end-1] != 0 {
		t.Fatalf("the byte before the end magic is %d, want an empty section's count", b[end-1])
	}
	v2 := append(slices.Clone(b[:end-1]), b[end:len(b)-4]...)
	binary.BigEndian.PutUint16(v2[len(checkpointMagic):], 2)
	v2 = binary.BigEndian.AppendUint32(v2, crc32.Checksum(v2, crcTable))
	rv, l, err := decodeCheckpoint(bytes.NewReader(v2), codec.JSON[ckptRow]{}, "x", false, nil)
	if err != nil {
		t.Fatalf("format 2: %v", err)
	}
	if rv != 9 || l.n != len(keys) || l.later != nil {
		t.Fatalf("format 2: rv %d, %d objects, later %v; want 9, %d objects, none later", rv, l.n, l.later, len(keys))
	}
}
