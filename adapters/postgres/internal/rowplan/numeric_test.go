package rowplan

import (
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// FuzzNumericText: for any text, numericText either gives the value pgx's
// own text plan gives or leaves it to that plan; the seeds are the forms
// Postgres prints (integers, trailing zeros, scale, signs, 18 and 19
// digits, NaN and infinities) and some it never does.
func FuzzNumericText(f *testing.F) {
	for _, s := range []string{"0", "-0", "1", "-1", "10", "100", "-100", "000", "-00", "0100", "1.50", "-0.001", "124998.75",
		"123456789012345678", "1234567890123456789", "-999999999999999999", "99999999999999999.9", "0.000000000000000001",
		"NaN", "Infinity", "-Infinity", "", "-", ".", ".5", "5.", "1.2.3", "+1", "1e5", " 1", "--1"} {
		f.Add(s)
	}
	tm := pgtype.NewMap()
	slow := tm.PlanScan(pgtype.NumericOID, pgtype.TextFormatCode, new(pgtype.Numeric))
	fast := numericText{slow: slow}
	f.Fuzz(func(t *testing.T, s string) {
		var want, got pgtype.Numeric
		wantErr := slow.Scan([]byte(s), &want)
		gotErr := fast.Scan([]byte(s), &got)
		if (wantErr != nil) != (gotErr != nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: numericText gives %+v (err %v), pgx %+v (err %v)", s, got, gotErr, want, wantErr)
		}
		var n pgtype.Numeric
		if parseSmallNumeric([]byte(s), &n) && wantErr != nil {
			t.Fatalf("%q: parsed as %+v, which pgx refuses: %v", s, n, wantErr)
		}
	})
}
