package core

import (
	"math"
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

// Plain rows compared in place say what reflect.DeepEqual says, field by
// field: nested structs and arrays, every numeric width, NaN and -0.
func TestAuditDeepEqualPlain(t *testing.T) {
	type inner struct {
		B bool
		U [3]uint16
		C complex64
	}
	type row struct {
		I8  int8
		I   int
		U32 uint32
		F   float64
		F32 float32
		S   string
		In  inner
	}
	eq := deepEqual[row]()
	base := row{I8: -1, I: 7, U32: 9, F: 1.5, F32: 2, S: "s", In: inner{B: true, U: [3]uint16{1, 2, 3}, C: 1i}}
	vary := []func(*row){
		func(r *row) {},
		func(r *row) { r.I8 = 1 },
		func(r *row) { r.I = 8 },
		func(r *row) { r.U32 = 0 },
		func(r *row) { r.F = math.NaN() },
		func(r *row) { r.F = 0 },
		func(r *row) { r.F32 = float32(math.Copysign(0, -1)) },
		func(r *row) { r.S = "t" },
		func(r *row) { r.In.B = false },
		func(r *row) { r.In.U[2] = 4 },
		func(r *row) { r.In.C = 2i },
	}
	for i, f := range vary {
		for j, g := range vary {
			a, b := base, base
			f(&a)
			g(&b)
			if got, want := eq(a, b), reflect.DeepEqual(a, b); got != want {
				t.Errorf("variants %d and %d: deepEqual %v, reflect.DeepEqual %v", i, j, got, want)
			}
		}
	}
	if _, ok := plainFields(reflect.TypeFor[row](), 0, nil); !ok {
		t.Error("a row of plain fields is not compared in place")
	}
	type withPtr struct {
		S string
		P *int
	}
	if _, ok := plainFields(reflect.TypeFor[withPtr](), 0, nil); ok {
		t.Error("a row with a pointer is compared in place")
	}
}
