package codec_test

import (
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/codec"
)

type binInner struct {
	A  string
	B  []byte
	At time.Time
}

type binRow struct {
	ID      int64
	Small   int8
	U       uint16
	F       float64
	F32     float32
	OK      bool
	Name    string
	Zero    *int32 // pointer to zero: must not come back nil
	Nil     *int32
	Tags    []string
	Empty   []string // empty, not nil
	NilTags []string
	Raw     []byte
	Inner   binInner
	PInner  *binInner
	Grid    [2][3]int
	Big     *big.Int
	Addr    netip.Addr
	Nested  [][]*string
}

func TestBinaryRoundTrip(t *testing.T) {
	c, err := codec.NewBinary[binRow]()
	if err != nil {
		t.Fatal(err)
	}
	zero, s := int32(0), "x"
	at := time.Date(2024, 2, 29, 13, 14, 15, 16, time.FixedZone("", 3600))
	in := binRow{
		ID: -1 << 62, Small: -128, U: 65535, F: -0.5, F32: 1.25, OK: true, Name: "héllo",
		Zero: &zero, Tags: []string{"a", "", "c"}, Empty: []string{}, Raw: []byte{0, 1, 255},
		Inner: binInner{A: "in", B: []byte{}, At: at}, PInner: &binInner{A: "p"},
		Grid: [2][3]int{{1, 2, 3}, {4, 5, -6}}, Big: new(big.Int).Lsh(big.NewInt(-3), 100),
		Addr: netip.MustParseAddr("2001:db8::1"), Nested: [][]*string{nil, {&s, nil}},
	}
	data, err := c.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Inner.At.Equal(at) {
		t.Errorf("time %v, want %v", out.Inner.At, at)
	}
	out.Inner.At, in.Inner.At = time.Time{}, time.Time{}
	if out.Big.Cmp(in.Big) != 0 {
		t.Errorf("big %v, want %v", out.Big, in.Big)
	}
	out.Big, in.Big = nil, nil
	if !reflect.DeepEqual(out, in) {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
	if out.Zero == nil || out.Nil != nil || out.Empty == nil || out.NilTags != nil || out.Inner.B == nil {
		t.Errorf("nil and empty are not told apart: %+v", out)
	}
	// Equal objects encode equally (checkpoints compare encodings).
	again, _ := c.Encode(in)
	again2, _ := c.Encode(in)
	if string(again) != string(again2) {
		t.Error("two encodings of one object differ")
	}

	// Every truncation and every flipped byte is an error or another
	// value, never a panic; a truncation is always an error.
	for n := range len(data) {
		if _, err := c.Decode(data[:n]); err == nil {
			t.Fatalf("decoding the first %d of %d bytes succeeded", n, len(data))
		}
	}
	for i := range data {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			bad := append([]byte(nil), data...)
			bad[i] ^= x
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("byte %d ^ %#x: panic %v", i, x, r)
					}
				}()
				c.Decode(bad)
			}()
		}
	}
	if _, err := c.Decode(append(data, 0)); err == nil {
		t.Error("a trailing byte was accepted")
	}
}

func TestBinaryRefusesWhatItCannotEncode(t *testing.T) {
	type withMap struct{ M map[string]int }
	type withAny struct{ V any }
	type withHidden struct {
		A string
		b int
	}
	type list struct {
		V    int
		Next *list
	}
	check := func(err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one saying %q", err, want)
		}
	}
	_, err := codec.NewBinary[withMap]()
	check(err, "map")
	_, err = codec.NewBinary[withAny]()
	check(err, "interface")
	_, err = codec.NewBinary[withHidden]()
	check(err, "unexported field")
	_, err = codec.NewBinary[list]()
	check(err, "recursive")
	_ = withHidden{}.b
}

// A type without byte slices decodes its strings into one allocation per
// object; they are still the right strings, and nothing aliases data.
func TestBinaryStringsShareOneAllocation(t *testing.T) {
	type row struct {
		A, B string
		N    int
		P    *string
		S    []string
	}
	c, err := codec.NewBinary[row]()
	if err != nil {
		t.Fatal(err)
	}
	p := "pointed"
	in := row{A: "alpha", B: "", N: -7, P: &p, S: []string{"x", "yy", ""}}
	data, err := c.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	clear(data) // Decode must not have kept it
	if !reflect.DeepEqual(out, in) {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
	data, _ = c.Encode(in)
	for n := range len(data) {
		if _, err := c.Decode(data[:n]); err == nil {
			t.Fatalf("decoding the first %d of %d bytes succeeded", n, len(data))
		}
	}
}

// Checkpoints of a plain struct load fastest with the Binary codec; a type
// it cannot encode is refused when the codec is made.
func ExampleNewBinary() {
	type Account struct {
		ID      int64
		Owner   string
		Limits  []int32
		Manager *string
	}
	c, err := codec.NewBinary[Account]()
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "checkpoints")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		panic(err)
	}
	_ = core.InformerOptions[Account]{
		Name:       "accounts",
		Checkpoint: &core.CheckpointOptions[Account]{Store: store, Codec: c},
	}
	data, _ := c.Encode(Account{ID: 7, Owner: "ada", Limits: []int32{10, 20}})
	back, _ := c.Decode(data)
	fmt.Println(len(data), back.ID, back.Owner, back.Limits, back.Manager == nil)

	_, err = codec.NewBinary[struct{ Attrs map[string]string }]()
	fmt.Println(err != nil)
	// Output:
	// 9 7 ada [10 20] true
	// true
}

// A value that does not fit the field it decodes into is an error, for
// each width (the fields of a struct decode through pointers, a bare value
// through reflection: both check); one that fits comes back as it was.
func TestBinaryOverflow(t *testing.T) {
	overflows[struct {
		I int8
		U uint8
	}](t)
	overflows[struct {
		I int16
		U uint16
	}](t)
	overflows[struct {
		I int32
		U uint32
	}](t)
	enc, _ := codec.NewBinary[binWide]()
	one, _ := enc.Encode(binWide{I: 1 << 40})
	if _, err := decodeWith[[2]int32](one); err == nil {
		t.Error("an array element took an overflowing value")
	}
}

type binWide struct {
	I int64
	U uint64
}

// overflows decodes encodings of binWide into T, a struct of a narrower
// signed and unsigned field.
func overflows[T any](t *testing.T) {
	t.Helper()
	enc, err := codec.NewBinary[binWide]()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []binWide{{I: 1 << 40}, {I: -1 << 40}, {U: 1 << 40}} {
		data, _ := enc.Encode(w)
		if _, err := decodeWith[T](data); err == nil || !strings.Contains(err.Error(), "overflows") {
			t.Errorf("%T from %+v: %v, want an overflow", *new(T), w, err)
		}
	}
	data, _ := enc.Encode(binWide{I: -5, U: 7})
	if v, err := decodeWith[T](data); err != nil || fmt.Sprint(v) != "{-5 7}" {
		t.Errorf("%T from {-5 7}: %v, %v", v, v, err)
	}
}

func decodeWith[T any](data []byte) (T, error) {
	c, err := codec.NewBinary[T]()
	if err != nil {
		var zero T
		return zero, err
	}
	return c.Decode(data)
}
