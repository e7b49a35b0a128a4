package pginformer_test

import (
	"strings"
	"testing"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// TestMappingProofLeavesNoServerErrors: NewTable proves mappings of narrow
// numeric, smallint, varchar and array columns by rendering sample values
// the column's type may refuse, without a failed statement in the
// server's log (a DBA would chase an ERROR at every start); a text[]
// mapped to []string is refused naming []*string, which holds its NULL
// elements.
func TestMappingProofLeavesNoServerErrors(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE DOMAIN small_positive AS int4 CHECK (VALUE BETWEEN 1 AND 10);
		CREATE TABLE narrow (id bigint PRIMARY KEY, price numeric(5,2) NOT NULL, n int2 NOT NULL, code varchar(3) NOT NULL, tags text[], d small_positive NOT NULL)`)
	type narrowT struct {
		ID    int64     `db:"id"`
		Price float64   `db:"price"`
		N     int16     `db:"n"`
		Code  string    `db:"code"`
		Tags  []*string `db:"tags"`
		D     int32     `db:"d"`
	}
	src := newSource(t, pg, pginformer.Options{})
	ctx := ctxFor(t)
	if _, err := pginformer.NewTable[narrowT](ctx, src, "narrow", pginformer.TableOptions[narrowT]{}); err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	type badTags struct {
		ID    int64    `db:"id"`
		Price float64  `db:"price"`
		N     int16    `db:"n"`
		Code  string   `db:"code"`
		Tags  []string `db:"tags"`
		D     int32    `db:"d"`
	}
	_, err := pginformer.NewTable[badTags](ctx, src, "narrow", pginformer.TableOptions[badTags]{})
	if err == nil || !strings.Contains(err.Error(), "[]*string") {
		t.Errorf("text[] into []string: %v, want the fix to name []*string", err)
	}
	for _, line := range strings.Split(pg.Log(), "\n") {
		if strings.Contains(line, "ERROR:") {
			t.Errorf("the mapping proof left a failed statement in the server's log: %s", line)
		}
	}
}
