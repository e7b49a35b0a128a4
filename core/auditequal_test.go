package core

import (
	"reflect"
	"testing"
)

// The audit's default comparison is reflect.DeepEqual's, without
// allocating per compared pair.
func TestAuditDeepEqual(t *testing.T) {
	type row struct {
		ID   int64
		Name string
		Tags []*string
		M    map[string]int
	}
	s1, s2 := "a", "a"
	a := row{ID: 1, Name: "x", Tags: []*string{&s1}, M: map[string]int{"k": 1}}
	eq := deepEqual[row]()
	for _, b := range []row{
		a,
		{ID: 1, Name: "x", Tags: []*string{&s2}, M: map[string]int{"k": 1}},
		{ID: 2, Name: "x", Tags: []*string{&s1}, M: map[string]int{"k": 1}},
		{ID: 1, Name: "x", Tags: []*string{&s1}, M: map[string]int{"k": 2}},
		{ID: 1, Name: "x"},
	} {
		if got, want := eq(a, b), reflect.DeepEqual(a, b); got != want {
			t.Errorf("deepEqual(%+v, %+v) = %v, reflect.DeepEqual says %v", a, b, got, want)
		}
	}
	// A row of plain fields: boxing two copies was all it allocated.
	type flat struct {
		ID         int64
		Name, Mail string
		Age        int32
	}
	x, y := flat{1, "x", "m", 2}, flat{1, "x", "m", 2}
	feq := deepEqual[flat]()
	if n := testing.AllocsPerRun(100, func() { feq(x, y) }); n != 0 {
		t.Errorf("deepEqual allocates %v times per comparison of plain rows, want 0", n)
	}
}
