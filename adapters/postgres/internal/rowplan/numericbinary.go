package rowplan

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"
)

// Numeric read in binary, decoded as its text. A List asked the server for
// numeric columns as text, format('%s', c), so that a listed value and the
// stream's (pgoutput sends text) decode alike: pgx's binary decoding of a
// numeric does not (0.00 in binary decodes with Exp 0, as text with Exp
// -2). The server's format() cost it more than the column's binary form,
// 0.45 s against 0.1 s a million rows, with the server's backend what a
// List's time waits for on two cores. So numeric comes in binary and is
// written here into the very text numeric_out makes of it (AppendNumericText),
// which the column's text plan then decodes: the same value as the stream's
// by construction, for every destination type, and the text TOAST memory
// keeps.

// AsText reports whether a column of type oid, whatever its destination, is
// read in binary and decoded as the text its type's output function makes
// of it (see above): a Plan compiled with the binary format for it does so.
func AsText(oid uint32) bool { return oid == pgtype.NumericOID }

var errNumericBinary = errors.New("malformed binary numeric")

// AppendNumericText appends to dst the text numeric_out makes of the
// numeric whose binary form (numeric_send's) is src: an optional minus, the
// integer digits (0 for none), and, for a display scale above 0, a point
// and exactly that many digits; NaN, Infinity and -Infinity for the special
// values.
func AppendNumericText(dst, src []byte) ([]byte, error) {
	if len(src) < 8 {
		return dst, errNumericBinary
	}
	ndigits := int(int16(binary.BigEndian.Uint16(src)))
	weight := int(int16(binary.BigEndian.Uint16(src[2:])))
	sign := binary.BigEndian.Uint16(src[4:])
	dscale := int(int16(binary.BigEndian.Uint16(src[6:])))
	if ndigits < 0 || dscale < 0 || len(src) != 8+2*ndigits {
		return dst, errNumericBinary
	}
	switch sign {
	case 0xC000:
		return append(dst, "NaN"...), nil
	case 0xD000:
		return append(dst, "Infinity"...), nil
	case 0xF000:
		return append(dst, "-Infinity"...), nil
	case 0x4000:
		dst = append(dst, '-')
	case 0:
	default:
		return dst, errNumericBinary
	}
	for i := range ndigits {
		if binary.BigEndian.Uint16(src[8+2*i:]) >= 10000 {
			return dst, errNumericBinary
		}
	}
	// digit is the i-th base-10,000 digit, weight-i its power; 0 past
	// either end.
	digit := func(i int) uint16 {
		if i < 0 || i >= ndigits {
			return 0
		}
		return binary.BigEndian.Uint16(src[8+2*i:])
	}
	d := 0
	if weight < 0 {
		d = weight + 1
		dst = append(dst, '0')
	} else {
		dst = strconv.AppendUint(dst, uint64(digit(0)), 10) // no leading zeros
		for d = 1; d <= weight; d++ {
			dst = appendDigits4(dst, digit(d))
		}
	}
	if dscale > 0 {
		dst = append(dst, '.')
		end := len(dst) + dscale
		for i := 0; i < dscale; i += 4 {
			dst = appendDigits4(dst, digit(d))
			d++
		}
		dst = dst[:end]
	}
	return dst, nil
}

// appendDigits4 appends v (< 10,000) as four decimal digits.
func appendDigits4(dst []byte, v uint16) []byte {
	return append(dst, byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
}

// asText scans a binary value of an AsText column with the column's text
// plan, through the text AppendNumericText makes of it in buf (the Plan's,
// reused: a plan does not retain what it scans).
type asText struct {
	text pgtype.ScanPlan
	buf  *[]byte
}

func (p asText) Scan(src []byte, dst any) error {
	if src == nil {
		return p.text.Scan(nil, dst)
	}
	txt, err := AppendNumericText((*p.buf)[:0], src)
	if err != nil {
		return err
	}
	*p.buf = txt
	return p.text.Scan(txt, dst)
}

// numericBinary scans numeric's binary form into a pgtype.Numeric to the
// value its text would scan to (text: the asText plan), straight from the
// base-10,000 digits when they make at most 15 decimal digits (the digits
// of the last group past the scale included, an int64's room), skipping
// the text: Int is every digit down to the display scale, Exp minus that
// scale, or, without one, the trailing zeros taken off Int (one digit
// always stays), as parseSmallNumeric reads the text. Anything else (NaN,
// the infinities, longer values, a malformed form) goes through the text.
type numericBinary struct{ text pgtype.ScanPlan }

func (p numericBinary) Scan(src []byte, dst any) error {
	if n, ok := dst.(*pgtype.Numeric); ok && src != nil && smallNumericBinary(src, n) {
		return nil
	}
	return p.text.Scan(src, dst)
}

// smallNumericBinary sets n from numeric's binary form src as described
// at numericBinary and reports whether it could.
func smallNumericBinary(src []byte, n *pgtype.Numeric) bool {
	if len(src) < 8 {
		return false
	}
	ndigits := int(int16(binary.BigEndian.Uint16(src)))
	weight := int(int16(binary.BigEndian.Uint16(src[2:])))
	sign := binary.BigEndian.Uint16(src[4:])
	dscale := int(int16(binary.BigEndian.Uint16(src[6:])))
	if sign != 0 && sign != 0x4000 || ndigits < 0 || dscale < 0 || len(src) != 8+2*ndigits {
		return false
	}
	// The decimal digits the groups make, read down to the last group's
	// end, and the power of ten of the last.
	last := 4 * (weight - ndigits + 1)
	if 4*max(weight+1, 0)-min(last, -dscale) > 15 {
		return false
	}
	var u uint64
	for i := range ndigits {
		d := binary.BigEndian.Uint16(src[8+2*i:])
		if d >= 10000 {
			return false
		}
		u = u*10000 + uint64(d)
	}
	for e := last; e > -dscale; e-- {
		u *= 10
	}
	for e := last; e < -dscale; e++ {
		if u%10 != 0 {
			return false // digits past the scale: not numeric_send's
		}
		u /= 10
	}
	exp := int32(-dscale)
	if dscale == 0 {
		for u != 0 && u%10 == 0 {
			u /= 10
			exp++
		}
	}
	v := int64(u)
	if sign == 0x4000 {
		v = -v
	}
	*n = pgtype.Numeric{Int: smallInt(v), Exp: exp, Valid: true}
	return true
}
