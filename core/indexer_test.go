package core

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
)

type user struct {
	Name   string
	Groups []string
}

func byGroup(u *user) ([]string, error) { return u.Groups, nil }

func sortedNames(us []*user) []string {
	out := make([]string, 0, len(us))
	for _, u := range us {
		out = append(out, u.Name)
	}
	sort.Strings(out)
	return out
}

func TestIndexerByIndexFollowsUpdatesAndDeletes(t *testing.T) {
	s := NewIndexer(Indexers[*user]{"group": byGroup})
	must(t, s.Add("a", &user{Name: "a", Groups: []string{"x", "y"}}))
	must(t, s.Add("b", &user{Name: "b", Groups: []string{"y"}}))
	got, err := s.ByIndex("group", "y")
	must(t, err)
	if n := sortedNames(got); !reflect.DeepEqual(n, []string{"a", "b"}) {
		t.Fatalf("ByIndex y = %v", n)
	}
	must(t, s.Add("a", &user{Name: "a", Groups: []string{"z"}}))
	if keys, _ := s.IndexKeys("group", "y"); !reflect.DeepEqual(keys, []string{"b"}) {
		t.Fatalf("IndexKeys y after update = %v", keys)
	}
	if vals := s.ListIndexFuncValues("group"); !reflect.DeepEqual(vals, []string{"y", "z"}) {
		t.Fatalf("values = %v, want the emptied x dropped", vals)
	}
	must(t, s.Delete("b"))
	if vals := s.ListIndexFuncValues("group"); !reflect.DeepEqual(vals, []string{"z"}) {
		t.Fatalf("values after delete = %v", vals)
	}
	same, err := s.Index("group", &user{Groups: []string{"z"}})
	must(t, err)
	if n := sortedNames(same); !reflect.DeepEqual(n, []string{"a"}) {
		t.Fatalf("Index = %v", n)
	}
	if _, err := s.ByIndex("nope", "x"); err == nil {
		t.Fatal("unknown index: want error")
	}
}

func TestIndexerFailingIndexLeavesStoreUnchanged(t *testing.T) {
	boom := errors.New("boom")
	s := NewIndexer(Indexers[*user]{
		"group": byGroup,
		"bad": func(u *user) ([]string, error) {
			if u.Name == "bad" {
				return nil, boom
			}
			return []string{u.Name}, nil
		},
	})
	must(t, s.Add("k", &user{Name: "ok", Groups: []string{"g"}}))
	err := s.Add("k", &user{Name: "bad", Groups: []string{"h"}})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("err = %v, want boom naming the key", err)
	}
	u, _ := s.Get("k")
	if u.Name != "ok" {
		t.Fatalf("object changed to %v", u.Name)
	}
	if keys, _ := s.IndexKeys("group", "g"); !reflect.DeepEqual(keys, []string{"k"}) {
		t.Fatalf("index changed: %v", keys)
	}
}

func TestIndexerReplaceAndAddIndexers(t *testing.T) {
	s := NewIndexer[*user](nil)
	must(t, s.Add("old", &user{Name: "old"}))
	must(t, s.replace(map[string]*user{"a": {Name: "a", Groups: []string{"g"}}, "b": {Name: "b", Groups: []string{"g"}}}))
	if _, ok := s.Get("old"); ok {
		t.Fatal("Replace kept a key")
	}
	must(t, s.AddIndexers(Indexers[*user]{"group": byGroup}))
	if keys, _ := s.IndexKeys("group", "g"); !reflect.DeepEqual(keys, []string{"a", "b"}) {
		t.Fatalf("AddIndexers on a filled store: %v", keys)
	}
	if err := s.AddIndexers(Indexers[*user]{"group": byGroup}); err == nil {
		t.Fatal("duplicate indexer: want error")
	}
	if s.Len() != 2 || len(s.List()) != 2 || len(s.ListKeys()) != 2 {
		t.Fatal("Len/List/ListKeys disagree")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
