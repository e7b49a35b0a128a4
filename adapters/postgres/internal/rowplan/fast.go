package rowplan

import (
	"encoding/binary"
	"reflect"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"
)

// Columns DecodeFields decodes itself: a binary int2, int4, int8 or
// timestamptz into a field of exactly int16, int32, int64 or time.Time,
// with pgx's own codec for the type. Through pgx's plan each cost a
// reflect.NewAt, an interface and the plan's calls, a tenth of the List's
// decoding for three such columns. The value is the one pgx's plan makes;
// whatever that plan would refuse or treat apart (NULL, a wrong length,
// the infinities, a time far from now) still goes to it, for its value or
// its error.
type fastKind uint8

const (
	fastInt16 fastKind = iota + 1
	fastInt32
	fastInt64
	fastTime
)

// fastFor is the fastKind of a column of type oid arriving in format into
// a field of type t, 0 for none.
func fastFor(tm *pgtype.Map, oid uint32, format int16, t reflect.Type) fastKind {
	if format != pgtype.BinaryFormatCode {
		return 0
	}
	typ, ok := tm.TypeForOID(oid)
	if !ok {
		return 0
	}
	switch c := typ.Codec.(type) {
	case pgtype.Int2Codec:
		if t == reflect.TypeFor[int16]() {
			return fastInt16
		}
	case pgtype.Int4Codec:
		if t == reflect.TypeFor[int32]() {
			return fastInt32
		}
	case pgtype.Int8Codec:
		if t == reflect.TypeFor[int64]() {
			return fastInt64
		}
	case *pgtype.TimestamptzCodec:
		if t == timeType && c.ScanLocation == nil && oid == pgtype.TimestamptzOID {
			return fastTime
		}
	}
	return 0
}

// Microseconds from 2000-01-01 (timestamptz's zero) of the years 1900
// and 2200: well inside what pgx takes, and no infinity.
const (
	fastTimeMin = -3155673600_000_000
	fastTimeMax = 6311433600_000_000
	pgEpochUnix = 946684800
)

// decode writes data, the column's binary form, into the field at p as
// pgx's plan would, and reports whether it did (else the plan must).
func (k fastKind) decode(p unsafe.Pointer, data []byte) bool {
	switch k {
	case fastInt16:
		if len(data) == 2 {
			*(*int16)(p) = int16(binary.BigEndian.Uint16(data))
			return true
		}
	case fastInt32:
		if len(data) == 4 {
			*(*int32)(p) = int32(binary.BigEndian.Uint32(data))
			return true
		}
	case fastInt64:
		if len(data) == 8 {
			*(*int64)(p) = int64(binary.BigEndian.Uint64(data))
			return true
		}
	case fastTime:
		if len(data) == 8 {
			us := int64(binary.BigEndian.Uint64(data))
			if us >= fastTimeMin && us < fastTimeMax {
				// pgx's own arithmetic, to the same time.Time.
				*(*time.Time)(p) = time.Unix(pgEpochUnix+us/1_000_000, us%1_000_000*1_000)
				return true
			}
		}
	}
	return false
}
