package core

import (
	"reflect"
	"unsafe"
)

// deepEqual is reflect.DeepEqual of two T without boxing a copy of each
// (two allocations of T's size per compared object, which made an audit
// of a table of structs cost more than a List of it): the objects are
// copied into two T of its own. A T of plain fields (booleans, numbers,
// strings, and structs and arrays of them, as most rows are) is then
// compared field by field, which is what DeepEqual does for them, without
// reflection per object; any other T through DeepEqual of the two
// pointers, which an interface holds without allocating. Not safe for
// concurrent use.
func deepEqual[T any]() func(a, b T) bool {
	// The objects are copied to x and y: a pointer to a parameter handed
	// to a function value would move every parameter to the heap.
	x, y := new(T), new(T)
	same := func() bool { return reflect.DeepEqual(x, y) }
	if fields, ok := plainFields(reflect.TypeFor[T](), 0, nil); ok {
		px, py := unsafe.Pointer(x), unsafe.Pointer(y)
		same = func() bool {
			for _, f := range fields {
				if !f.equal(unsafe.Add(px, f.off), unsafe.Add(py, f.off)) {
					return false
				}
			}
			return true
		}
	}
	return func(a, b T) bool {
		*x, *y = a, b
		eq := same()
		var zero T
		*x, *y = zero, zero // hold no object past the comparison
		return eq
	}
}

// plainField is one field of a plain type, at off, compared as its kind's
// == does.
type plainField struct {
	off   uintptr
	equal func(a, b unsafe.Pointer) bool
}

// plainFields lists t's fields (at base) when t is plain: false when it
// holds anything else (pointers, slices, maps, interfaces...).
func plainFields(t reflect.Type, base uintptr, out []plainField) ([]plainField, bool) {
	eq := func(f func(a, b unsafe.Pointer) bool) ([]plainField, bool) {
		return append(out, plainField{off: base, equal: f}), true
	}
	switch t.Kind() {
	case reflect.Bool:
		return eq(func(a, b unsafe.Pointer) bool { return *(*bool)(a) == *(*bool)(b) })
	case reflect.Int8, reflect.Uint8:
		return eq(func(a, b unsafe.Pointer) bool { return *(*uint8)(a) == *(*uint8)(b) })
	case reflect.Int16, reflect.Uint16:
		return eq(func(a, b unsafe.Pointer) bool { return *(*uint16)(a) == *(*uint16)(b) })
	case reflect.Int32, reflect.Uint32:
		return eq(func(a, b unsafe.Pointer) bool { return *(*uint32)(a) == *(*uint32)(b) })
	case reflect.Int, reflect.Uint, reflect.Int64, reflect.Uint64, reflect.Uintptr:
		if t.Size() == 4 {
			return eq(func(a, b unsafe.Pointer) bool { return *(*uint32)(a) == *(*uint32)(b) })
		}
		return eq(func(a, b unsafe.Pointer) bool { return *(*uint64)(a) == *(*uint64)(b) })
	case reflect.Float32: // == on the float: NaN differs from itself, -0 equals 0, as DeepEqual says
		return eq(func(a, b unsafe.Pointer) bool { return *(*float32)(a) == *(*float32)(b) })
	case reflect.Float64:
		return eq(func(a, b unsafe.Pointer) bool { return *(*float64)(a) == *(*float64)(b) })
	case reflect.Complex64:
		return eq(func(a, b unsafe.Pointer) bool { return *(*complex64)(a) == *(*complex64)(b) })
	case reflect.Complex128:
		return eq(func(a, b unsafe.Pointer) bool { return *(*complex128)(a) == *(*complex128)(b) })
	case reflect.String:
		return eq(func(a, b unsafe.Pointer) bool { return *(*string)(a) == *(*string)(b) })
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			var ok bool
			if out, ok = plainFields(f.Type, base+f.Offset, out); !ok {
				return nil, false
			}
		}
		return out, true
	case reflect.Array:
		for i := range t.Len() {
			var ok bool
			if out, ok = plainFields(t.Elem(), base+uintptr(i)*t.Elem().Size(), out); !ok {
				return nil, false
			}
		}
		return out, true
	}
	return nil, false
}
