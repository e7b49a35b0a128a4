package wal

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/jackc/pglogrepl"
)

// tupleBytes encodes a pgoutput TupleData: each value is nil (NULL), "\x00u"
// (unchanged TOAST) or text.
func tupleBytes(vals ...*string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(vals)))
	for _, v := range vals {
		switch {
		case v == nil:
			b = append(b, 'n')
		case *v == "\x00u":
			b = append(b, 'u')
		default:
			b = append(b, 't')
			b = binary.BigEndian.AppendUint32(b, uint32(len(*v)))
			b = append(b, *v...)
		}
	}
	return b
}

func str(s string) *string { return &s }

// pgoutputChanges are row-change messages of every shape pgoutput sends.
func pgoutputChanges() map[string][]byte {
	rel := binary.BigEndian.AppendUint32(nil, 16384)
	msg := func(kind byte, parts ...[]byte) []byte {
		b := append([]byte{kind}, rel...)
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	row := tupleBytes(str("1"), str(""), nil, str("\x00u"), str("a longer value with 'quotes' and \\ and é"))
	key := tupleBytes(str("1"), nil, nil, nil, nil)
	return map[string][]byte{
		"insert":          msg('I', []byte{'N'}, row),
		"update":          msg('U', []byte{'N'}, row),
		"update key":      msg('U', []byte{'K'}, key, []byte{'N'}, row),
		"update old":      msg('U', []byte{'O'}, row, []byte{'N'}, row),
		"delete key":      msg('D', []byte{'K'}, key),
		"delete old":      msg('D', []byte{'O'}, row),
		"insert 1 column": msg('I', []byte{'N'}, tupleBytes(str("x"))),
	}
}

// TestParseChange: our row-change parser reads every shape as pglogrepl's
// does, and its values do not share the input buffer (the receive buffer
// is reused by the next message).
func TestParseChange(t *testing.T) {
	for name, data := range pgoutputChanges() {
		t.Run(name, func(t *testing.T) {
			in := bytes.Clone(data)
			var a Arena
			id, c, err := ParseChange(in, &a)
			if err != nil {
				t.Fatal(err)
			}
			clear(in) // the receive buffer being reused
			m, err := pglogrepl.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			var wantID uint32
			var wantNew, wantOld *pglogrepl.TupleData
			var wantOldKind uint8
			var wantKind Kind
			switch m := m.(type) {
			case *pglogrepl.InsertMessage:
				wantKind, wantID, wantNew = Insert, m.RelationID, m.Tuple
			case *pglogrepl.UpdateMessage:
				wantKind, wantID, wantNew, wantOld, wantOldKind = Update, m.RelationID, m.NewTuple, m.OldTuple, m.OldTupleType
			case *pglogrepl.DeleteMessage:
				wantKind, wantID, wantOld, wantOldKind = Delete, m.RelationID, m.OldTuple, m.OldTupleType
			default:
				t.Fatalf("pglogrepl parsed %T", m)
			}
			if id != wantID || c.Kind != wantKind {
				t.Errorf("relation %d kind %d, want %d kind %d", id, c.Kind, wantID, wantKind)
			}
			if wantOld != nil && c.OldKind != wantOldKind {
				t.Errorf("old tuple kind %q, want %q", c.OldKind, wantOldKind)
			}
			sameTuple(t, "new", c.New, wantNew)
			sameTuple(t, "old", c.Old, wantOld)
		})
	}
}

func sameTuple(t *testing.T, what string, got []Value, want *pglogrepl.TupleData) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Errorf("%s tuple: got %d values, want none", what, len(got))
		}
		return
	}
	if len(got) != len(want.Columns) {
		t.Fatalf("%s tuple: %d values, want %d", what, len(got), len(want.Columns))
	}
	for i, c := range want.Columns {
		if got[i].Kind != c.DataType || !bytes.Equal(got[i].Data, c.Data) {
			t.Errorf("%s tuple column %d: %q %q, want %q %q", what, i, got[i].Kind, got[i].Data, c.DataType, c.Data)
		}
	}
}

// TestParseChangeMalformed: a truncated or unknown message is an error
// that says what is wrong, never a panic or a short row.
func TestParseChangeMalformed(t *testing.T) {
	for name, data := range pgoutputChanges() {
		for n := 0; n < len(data); n++ {
			var a Arena
			if _, _, err := ParseChange(data[:n], &a); err == nil && n > 0 {
				// A prefix may be well-formed only if it ends exactly at a
				// tuple's end, which no proper prefix of these does.
				t.Errorf("%s cut to %d of %d bytes: no error", name, n, len(data))
			}
		}
	}
	var a Arena
	bad := append([]byte{'I', 0, 0, 0x40, 0, 'N'}, tupleBytes(str("1"))...)
	bad[len(bad)-6] = 'b' // a binary value, which we never ask for
	if _, _, err := ParseChange(bad, &a); err == nil {
		t.Error("a binary value: no error")
	}
}

// FuzzParseChange: on any input, parseChange returns an error or values
// that lie within the message; on what pglogrepl parses, it agrees.
func FuzzParseChange(f *testing.F) {
	for _, data := range pgoutputChanges() {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a Arena
		_, c, err := ParseChange(data, &a)
		if err != nil {
			return
		}
		total := 0
		for _, v := range append(append([]Value(nil), c.New...), c.Old...) {
			total += len(v.Data)
			if v.Kind != 't' && v.Kind != 'n' && v.Kind != 'u' {
				t.Fatalf("value kind %q", v.Kind)
			}
		}
		if total > len(data) {
			t.Fatalf("%d value bytes from a %d-byte message", total, len(data))
		}
	})
}
