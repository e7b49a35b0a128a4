package pginformer_test

import (
	"errors"
	"fmt"
	"testing"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

type docRow struct {
	ID  int64 `db:"id"`
	Doc struct {
		A int `json:"a"`
	} `db:"doc"`
}

// TestUndecodableUpdateNeverLeavesTheOldRow: with SkipUndecodable, an
// update whose new row does not decode into T (a jsonb value of another
// shape) reaches the informer as an event carrying the row's key and a
// *driver.DecodeError, and the row's previous object does not stay in the
// cache looking current: the key leaves the cache (or the informer stops
// with a permanent error, by the core's policy). Needs the core's rule for
// undecodable updates (issue 36 item 5).
func TestUndecodableUpdateNeverLeavesTheOldRow(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE uj (id bigint PRIMARY KEY, doc jsonb NOT NULL); INSERT INTO uj SELECT i, jsonb_build_object('a', i) FROM generate_series(1, 3) i`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{})
	tbl, err := pginformer.NewTable[docRow](ctxFor(t), src, "uj", pginformer.TableOptions[docRow]{SkipUndecodable: true})
	if err != nil {
		t.Fatal(err)
	}
	inf, errs := informertest.Run[docRow](t, tbl, core.InformerOptions[docRow]{})
	at := write(t, conn, `UPDATE uj SET doc = '{"a": "not a number"}' WHERE id = 2`)
	eventually(t, "the undecodable update applied, or the informer stopped", func() error {
		if inf.AppliedVersion() >= at || errs.Is(driver.ErrPermanent) != nil {
			return nil
		}
		return fmt.Errorf("applied %d, want %d", inf.AppliedVersion(), at)
	})
	if old, ok := inf.Lister().Get("2"); ok && old.Doc.A == 2 {
		t.Errorf("row 2 still holds its old value %+v after an update the cache could not decode: a stale object looking current", old)
	}
	var de *driver.DecodeError
	if err := errs.Find(func(err error) bool { return errors.As(err, &de) }); err == nil || de.Key != "2" {
		t.Errorf("errors %v: want a DecodeError for key 2", errs.All())
	}
	if tbl.Skipped() != 1 {
		t.Errorf("Skipped = %d, want 1", tbl.Skipped())
	}
}
