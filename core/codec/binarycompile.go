package codec

import (
	"encoding"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"
	"unsafe"
)

// binCompiler turns a Go type into the ops Binary encodes and decodes it
// with; binary.go holds the codec and its decoder.

type binCompiler struct {
	busy   map[reflect.Type]bool
	schema strings.Builder
	bytes  bool // T holds a byte slice
	// foreign: T holds a type with a marshaler from outside the
	// standard library.
	foreign bool
}

func (c *binCompiler) compile(t reflect.Type, path string) (*binOp, error) {
	if c.busy[t] {
		return nil, fmt.Errorf("%s: recursive type %s", path, t)
	}
	pt := reflect.PointerTo(t)
	if (pt.Implements(binMarshalerType) && pt.Implements(binUnmarshalType) || pt.Implements(gobCoderType)) && !stdMarshaler[t.PkgPath()] {
		c.foreign = true
	}
	switch {
	case pt.Implements(binMarshalerType) && pt.Implements(binUnmarshalType):
		c.schema.WriteString(t.String() + ":bin;")
		return marshalerOp(func(p reflect.Value) ([]byte, error) {
			return p.Interface().(encoding.BinaryMarshaler).MarshalBinary()
		}, func(p reflect.Value, b []byte) error {
			return p.Interface().(encoding.BinaryUnmarshaler).UnmarshalBinary(b)
		}), nil
	case pt.Implements(gobCoderType):
		c.schema.WriteString(t.String() + ":gob;")
		return marshalerOp(func(p reflect.Value) ([]byte, error) {
			return p.Interface().(gobCoder).GobEncode()
		}, func(p reflect.Value, b []byte) error {
			return p.Interface().(gobCoder).GobDecode(b)
		}), nil
	}
	fmt.Fprintf(&c.schema, "%s;", t.Kind())
	op, err := c.compileKind(t, path)
	if op != nil && op.decPtr == nil {
		op.decPtr = plainDecoder(t)
	}
	return op, err
}

// compileKind compiles a type that has no marshaler, by its kind: the
// kinds that hold other types compile those first (and add them to the
// schema), the rest are encoded by value (scalarOp).
func (c *binCompiler) compileKind(t reflect.Type, path string) (*binOp, error) {
	switch t.Kind() {
	case reflect.Pointer:
		return c.pointerOp(t, path)
	case reflect.Slice:
		return c.sliceOp(t, path)
	case reflect.Array:
		return c.arrayOp(t, path)
	case reflect.Struct:
		return c.structOp(t, path)
	}
	if op := scalarOp(t.Kind()); op != nil {
		return op, nil
	}
	return nil, fmt.Errorf("%s: %s values (%s) are not supported", path, t.Kind(), t)
}

// scalarOp is the op of a kind that holds no other type: a bool, a
// string or a number (numberOp); nil for another kind.
func scalarOp(k reflect.Kind) *binOp {
	switch k {
	case reflect.Bool:
		return &binOp{
			enc: func(dst []byte, v reflect.Value) ([]byte, error) {
				if v.Bool() {
					return append(dst, 1), nil
				}
				return append(dst, 0), nil
			},
			dec: func(d *binDecoder, v reflect.Value) error {
				if len(d.buf) == 0 || d.buf[0] > 1 {
					return errBinShort
				}
				v.SetBool(d.buf[0] == 1)
				d.buf = d.buf[1:]
				return nil
			},
		}
	case reflect.String:
		return &binOp{
			enc: func(dst []byte, v reflect.Value) ([]byte, error) {
				s := v.String()
				return append(binary.AppendUvarint(dst, uint64(len(s))), s...), nil
			},
			dec: func(d *binDecoder, v reflect.Value) error {
				p, err := d.bytes()
				switch {
				case err != nil:
				case d.arena != "":
					end := d.size - len(d.buf)
					v.SetString(d.arena[end-len(p) : end])
				default:
					v.SetString(string(p))
				}
				return err
			},
		}
	}
	return numberOp(k)
}

// numberOp is the op of an integer or a float kind; nil for another
// kind. Integers are varints, so that small values take few bytes
// whatever their type; decoding checks that the value fits the type it
// decodes into.
func numberOp(k reflect.Kind) *binOp {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &binOp{
			enc: func(dst []byte, v reflect.Value) ([]byte, error) { return binary.AppendVarint(dst, v.Int()), nil },
			dec: func(d *binDecoder, v reflect.Value) error {
				x, err := d.varint()
				if err == nil && v.OverflowInt(x) {
					err = fmt.Errorf("dbinformer: binary codec: %d overflows %s", x, v.Type())
				}
				if err == nil {
					v.SetInt(x)
				}
				return err
			},
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return &binOp{
			enc: func(dst []byte, v reflect.Value) ([]byte, error) { return binary.AppendUvarint(dst, v.Uint()), nil },
			dec: func(d *binDecoder, v reflect.Value) error {
				x, err := d.uvarint()
				if err == nil && v.OverflowUint(x) {
					err = fmt.Errorf("dbinformer: binary codec: %d overflows %s", x, v.Type())
				}
				if err == nil {
					v.SetUint(x)
				}
				return err
			},
		}
	case reflect.Float32, reflect.Float64:
		return &binOp{
			enc: func(dst []byte, v reflect.Value) ([]byte, error) {
				return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.Float())), nil
			},
			dec: func(d *binDecoder, v reflect.Value) error {
				if len(d.buf) < 8 {
					return errBinShort
				}
				v.SetFloat(math.Float64frombits(binary.LittleEndian.Uint64(d.buf)))
				d.buf = d.buf[8:]
				return nil
			},
		}
	}
	return nil
}

// pointerOp compiles a pointer: a byte saying whether it is nil, then
// its element. The pointer type is busy while its element compiles, so
// that a type that points to itself fails instead of recursing forever.
func (c *binCompiler) pointerOp(t reflect.Type, path string) (*binOp, error) {
	c.busy[t] = true
	elem, err := c.compile(t.Elem(), path)
	delete(c.busy, t)
	if err != nil {
		return nil, err
	}
	return &binOp{
		enc: func(dst []byte, v reflect.Value) ([]byte, error) {
			if v.IsNil() {
				return append(dst, 0), nil
			}
			return elem.enc(append(dst, 1), v.Elem())
		},
		dec: func(d *binDecoder, v reflect.Value) error {
			if len(d.buf) == 0 || d.buf[0] > 1 {
				return errBinShort
			}
			nonNil := d.buf[0] == 1
			d.buf = d.buf[1:]
			if !nonNil {
				return nil
			}
			p := reflect.New(v.Type().Elem())
			if err := elem.dec(d, p.Elem()); err != nil {
				return err
			}
			v.Set(p)
			return nil
		},
	}, nil
}

// arrayOp compiles an array: its length is in the schema, so its
// elements are written one after the other, with no count.
func (c *binCompiler) arrayOp(t reflect.Type, path string) (*binOp, error) {
	elem, err := c.compile(t.Elem(), path+"[]")
	if err != nil {
		return nil, err
	}
	n := t.Len()
	fmt.Fprintf(&c.schema, "len %d;", n)
	return &binOp{
		enc: func(dst []byte, v reflect.Value) (out []byte, err error) {
			for i := range n {
				if dst, err = elem.enc(dst, v.Index(i)); err != nil {
					return nil, err
				}
			}
			return dst, nil
		},
		dec: func(d *binDecoder, v reflect.Value) error {
			for i := range n {
				if err := elem.dec(d, v.Index(i)); err != nil {
					return err
				}
			}
			return nil
		},
	}, nil
}

// marshalerOp encodes through a type's own methods, called on its address.
func marshalerOp(m func(p reflect.Value) ([]byte, error), u func(p reflect.Value, b []byte) error) *binOp {
	return &binOp{
		enc: func(dst []byte, v reflect.Value) ([]byte, error) {
			if !v.CanAddr() {
				c := reflect.New(v.Type()).Elem()
				c.Set(v)
				v = c
			}
			b, err := m(v.Addr())
			if err != nil {
				return nil, err
			}
			return append(binary.AppendUvarint(dst, uint64(len(b))), b...), nil
		},
		dec: func(d *binDecoder, v reflect.Value) error {
			p, err := d.bytes()
			if err != nil {
				return err
			}
			return u(v.Addr(), p)
		},
	}
}

func (c *binCompiler) sliceOp(t reflect.Type, path string) (*binOp, error) {
	if t.Elem().Kind() == reflect.Uint8 && !reflect.PointerTo(t.Elem()).Implements(binMarshalerType) && !reflect.PointerTo(t.Elem()).Implements(gobCoderType) {
		c.schema.WriteString("bytes;")
		c.bytes = true
		return &binOp{
			enc: func(dst []byte, v reflect.Value) ([]byte, error) {
				if v.IsNil() {
					return append(dst, 0), nil
				}
				b := v.Bytes()
				return append(binary.AppendUvarint(dst, uint64(len(b))+1), b...), nil
			},
			dec: func(d *binDecoder, v reflect.Value) error {
				n, err := d.length()
				if err != nil || n == 0 {
					return err
				}
				if n-1 > len(d.buf) {
					return errBinShort
				}
				b := reflect.MakeSlice(v.Type(), n-1, n-1)
				copy(b.Bytes(), d.buf[:n-1])
				d.buf = d.buf[n-1:]
				v.Set(b)
				return nil
			},
		}, nil
	}
	c.busy[t] = true
	elem, err := c.compile(t.Elem(), path+"[]")
	delete(c.busy, t)
	if err != nil {
		return nil, err
	}
	return &binOp{
		enc: func(dst []byte, v reflect.Value) (out []byte, err error) {
			if v.IsNil() {
				return append(dst, 0), nil
			}
			n := v.Len()
			dst = binary.AppendUvarint(dst, uint64(n)+1)
			for i := range n {
				if dst, err = elem.enc(dst, v.Index(i)); err != nil {
					return nil, err
				}
			}
			return dst, nil
		},
		dec: func(d *binDecoder, v reflect.Value) error {
			n, err := d.length()
			if err != nil || n == 0 {
				return err
			}
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := range n - 1 {
				if err := elem.dec(d, s.Index(i)); err != nil {
					return err
				}
			}
			v.Set(s)
			return nil
		},
	}, nil
}

func (c *binCompiler) structOp(t reflect.Type, path string) (*binOp, error) {
	type field struct {
		index  int
		offset uintptr
		typ    reflect.Type
		op     *binOp
	}
	c.busy[t] = true
	defer delete(c.busy, t)
	fields := make([]field, 0, t.NumField())
	c.schema.WriteString("{")
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			return nil, fmt.Errorf("%s.%s: unexported field of %s (give %s MarshalBinary and UnmarshalBinary, or use JSON)", path, f.Name, t, t)
		}
		c.schema.WriteString(f.Name + ":")
		op, err := c.compile(f.Type, path+"."+f.Name)
		if err != nil {
			return nil, err
		}
		fields = append(fields, field{i, f.Offset, f.Type, op})
	}
	c.schema.WriteString("};")
	return &binOp{
		enc: func(dst []byte, v reflect.Value) (out []byte, err error) {
			for _, f := range fields {
				if dst, err = f.op.enc(dst, v.Field(f.index)); err != nil {
					return nil, err
				}
			}
			return dst, nil
		},
		dec: func(d *binDecoder, v reflect.Value) error {
			for _, f := range fields {
				if err := f.op.dec(d, v.Field(f.index)); err != nil {
					return err
				}
			}
			return nil
		},
		decPtr: func(d *binDecoder, p unsafe.Pointer) error {
			for _, f := range fields {
				fp := unsafe.Add(p, f.offset)
				var err error
				if f.op.decPtr != nil {
					err = f.op.decPtr(d, fp)
				} else {
					err = f.op.dec(d, reflect.NewAt(f.typ, fp).Elem())
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}, nil
}

// storeBits writes the low bits of v to the integer of that many bits at
// p: a signed value's bits are its two's complement, so one store serves
// both.
func storeBits(p unsafe.Pointer, bits uint, v uint64) {
	switch bits {
	case 8:
		*(*uint8)(p) = uint8(v)
	case 16:
		*(*uint16)(p) = uint16(v)
	case 32:
		*(*uint32)(p) = uint32(v)
	default:
		*(*uint64)(p) = v
	}
}

// plainDecoder is decPtr for the plain kinds (nil for others): the same
// encodings and checks as their dec.
func plainDecoder(t reflect.Type) func(d *binDecoder, p unsafe.Pointer) error {
	bits := uint(t.Size() * 8)
	switch t.Kind() {
	case reflect.Bool:
		return func(d *binDecoder, p unsafe.Pointer) error {
			if len(d.buf) == 0 || d.buf[0] > 1 {
				return errBinShort
			}
			*(*bool)(p) = d.buf[0] == 1
			d.buf = d.buf[1:]
			return nil
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(d *binDecoder, p unsafe.Pointer) error {
			x, err := d.varint()
			if err != nil {
				return err
			}
			if x<<(64-bits)>>(64-bits) != x {
				return fmt.Errorf("dbinformer: binary codec: %d overflows %s", x, t)
			}
			storeBits(p, bits, uint64(x))
			return nil
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return func(d *binDecoder, p unsafe.Pointer) error {
			x, err := d.uvarint()
			if err != nil {
				return err
			}
			if x<<(64-bits)>>(64-bits) != x {
				return fmt.Errorf("dbinformer: binary codec: %d overflows %s", x, t)
			}
			storeBits(p, bits, x)
			return nil
		}
	case reflect.Float32, reflect.Float64:
		return func(d *binDecoder, p unsafe.Pointer) error {
			if len(d.buf) < 8 {
				return errBinShort
			}
			f := math.Float64frombits(binary.LittleEndian.Uint64(d.buf))
			if bits == 32 {
				*(*float32)(p) = float32(f)
			} else {
				*(*float64)(p) = f
			}
			d.buf = d.buf[8:]
			return nil
		}
	case reflect.String:
		return func(d *binDecoder, p unsafe.Pointer) error {
			b, err := d.bytes()
			switch {
			case err != nil:
			case d.arena != "":
				end := d.size - len(d.buf)
				*(*string)(p) = d.arena[end-len(b) : end]
			default:
				*(*string)(p) = string(b)
			}
			return err
		}
	}
	return nil
}
