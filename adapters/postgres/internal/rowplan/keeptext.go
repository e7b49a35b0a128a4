package rowplan

import (
	"bytes"
	"reflect"
	"unsafe"
)

// KeepText returns the text of column c for TOAST memory without copying
// it where T already holds it: a text-like value decoded into a string
// shares that string's bytes (never written to), and a value decoded into
// a byte slice with the same bytes (json or jsonb into json.RawMessage)
// shares the slice (the cache's objects are read-only, as in client-go).
// Otherwise it copies.
//
// The text of an AsText column read in binary is made from its binary form.
func (sp *Plan) KeepText(obj unsafe.Pointer, row map[string]any, c int, data []byte, stripVer bool) []byte {
	cs := sp.cols[c]
	if cs != nil && cs.asText {
		// The row decoded: its binary form is well formed.
		txt, _ := AppendNumericText(nil, data)
		return txt
	}
	if cs != nil && TextLike(cs.oid) {
		var s string
		ok := false
		if sp.isMap {
			s, ok = row[cs.name].(string)
		} else if cs.field.Kind() == reflect.String {
			s, ok = *(*string)(unsafe.Add(obj, cs.offset)), true
		}
		if ok && len(s) == len(data) {
			return unsafe.Slice(unsafe.StringData(s), len(s))
		}
	}
	if stripVer && len(data) > 0 {
		data = data[1:]
	}
	if cs != nil && !sp.isMap && cs.field.Kind() == reflect.Slice && cs.field.Elem().Kind() == reflect.Uint8 {
		if b := *(*[]byte)(unsafe.Add(obj, cs.offset)); len(b) > 0 && bytes.Equal(b, data) {
			return b[:len(b):len(b)]
		}
	}
	return append([]byte(nil), data...)
}
