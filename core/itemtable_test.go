package core

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// pagesOf splits keys and objs into pages of 1<<bits.
func pagesOf[T any](keys []string, objs []T, bits uint) []*itemPage[T] {
	var pages []*itemPage[T]
	for lo := 0; lo < len(keys); lo += 1 << bits {
		hi := min(lo+1<<bits, len(keys))
		pages = append(pages, decodedPage(keys[lo:hi], objs[lo:hi]))
	}
	return pages
}

func mustBase[T any](t testing.TB, keys []string, objs []T, bits uint) *itemBase[T] {
	t.Helper()
	b, err := buildItemBase(pagesOf(keys, objs, bits), nil, bits)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzItems drives an items table that starts from a base and a plain map
// with the same writes, and checks that they hold the same: every key's
// get, len and the walk. The first byte picks how many of 48 keys the base
// holds (in pages of four) and how the table gets them: built into a base,
// or staged and then filed (stagedItems.file) into a base or, as too few,
// into the map. The rest are (op, key, value) triples.
func FuzzItems(f *testing.F) {
	f.Add([]byte{20, 0, 1, 1, 1, 1, 0, 0, 30, 2, 1, 2, 0, 3, 3})
	f.Add([]byte{48, 1, 0, 0, 1, 1, 0, 1, 2, 0, 1, 3, 0, 1, 4, 0, 1, 5, 0, 1, 6, 0, 1, 7, 0, 1, 8, 0})
	f.Add([]byte{0, 0, 5, 9, 1, 5, 0, 0, 5, 7})
	f.Add([]byte{49 + 30, 1, 3, 3, 2, 4, 0, 0, 40, 1})
	f.Add([]byte{98 + 9, 1, 3, 3, 2, 4, 0, 0, 40, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		ops = ops[:min(len(ops), 1+3*maxFuzzOps)]
		n := int(ops[0]) % 49
		model := map[string]int{}
		var keys []string
		var objs []int
		for i := range n {
			k := "k" + strconv.Itoa(i)
			keys, objs = append(keys, k), append(objs, i)
			model[k] = i
		}
		t1 := items[int]{m: map[string]int{}, base: mustBase(t, keys, objs, 2)}
		if mode := int(ops[0]) / 49 % 3; mode > 0 {
			// Staged, then filed into a base or, as too few, a map.
			st := &stagedItems[int]{bits: 2, minBase: map[bool]int{true: 0, false: 49}[mode == 1]}
			for i, k := range keys {
				st.add(k, objs[i])
			}
			t1 = st.file(0, nil)
			if (t1.base != nil) != (mode == 1) {
				t.Fatalf("mode %d, %d keys: filed into a base: %v", mode, n, t1.base != nil)
			}
		}
		check := func() {
			t.Helper()
			if t1.len() != len(model) {
				t.Fatalf("len %d, want %d", t1.len(), len(model))
			}
			for i := range 48 {
				k := "k" + strconv.Itoa(i)
				got, ok := t1.get(k)
				want, wok := model[k]
				if ok != wok || got != want {
					t.Fatalf("get(%s) = %d, %v; want %d, %v", k, got, ok, want, wok)
				}
			}
			if got := maps.Collect(t1.all); !maps.Equal(got, model) {
				t.Fatalf("walk %v, want %v", got, model)
			}
		}
		check()
		for ops = ops[1:]; len(ops) >= 3; ops = ops[3:] {
			k := "k" + strconv.Itoa(int(ops[1])%48)
			switch ops[0] % 3 {
			case 0:
				t1.set(k, int(ops[2]))
			case 1:
				old, existed := t1.swap(k, int(ops[2]))
				if want, wok := model[k]; old != want || existed != wok {
					t.Fatalf("swap(%s) returned %d, %v; want %d, %v", k, old, existed, want, wok)
				}
			case 2:
				t1.del(k)
				delete(model, k)
			}
			if ops[0]%3 != 2 {
				model[k] = int(ops[2])
			}
			check()
		}
	})
}

// A base refuses pages of the wrong size and repeated keys, and finds
// every key of a large one.
func TestItemBase(t *testing.T) {
	if _, err := buildItemBase([]*itemPage[int]{decodedPage([]string{"a"}, []int{1}), decodedPage([]string{"b"}, []int{2})}, nil, 1); err == nil {
		t.Error("a short page before the last was taken")
	}
	if _, err := buildItemBase([]*itemPage[int]{decodedPage([]string{"a", "b"}, []int{1, 2}), decodedPage([]string{"a"}, []int{3})}, nil, 1); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a repeated key: %v", err)
	}
	var keys []string
	var objs []int
	for i := range 100_000 {
		keys, objs = append(keys, strconv.Itoa(i)), append(objs, i)
	}
	b := mustBase(t, keys, objs, 9)
	for i, k := range keys {
		if pos, ok := b.find(k); !ok || *b.obj(pos) != i {
			t.Fatalf("find(%s) = %d, %v", k, pos, ok)
		}
	}
	if _, ok := b.find("absent"); ok {
		t.Error("found an absent key")
	}
	if got := slices.Sorted(maps.Keys(maps.Collect(b.all))); len(got) != len(keys) {
		t.Errorf("walk has %d keys, want %d", len(got), len(keys))
	}
}
