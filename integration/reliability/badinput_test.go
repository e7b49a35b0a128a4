package reliability_test

// Bad inputs and names that the adapters' own tests do not cover (see the
// report of issue 9 for what they do cover): empty and huge keys and
// values on etcd, NATS and Postgres; bucket, stream, schema and slot names
// with quotes, semicolons, spaces, dots and wildcards; a connection string
// with a password and TLS settings.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// decodeError waits for the *driver.DecodeError reported for key: a bad
// value must be reported, never dropped in silence.
func decodeError(t *testing.T, errs *informertest.Errors, key string) *driver.DecodeError {
	t.Helper()
	var de *driver.DecodeError
	errs.Wait(t, fmt.Sprintf("a DecodeError for key %q", key), func(err error) bool {
		return errors.As(err, &de) && de.Key == key
	})
	return de
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// etcd: a key equal to the prefix (the empty object key) is reported, not
// cached under ""; an empty value is cached as empty bytes (Raw) or
// reported (JSON); a 1 MiB value and a 4 KiB key arrive intact, through
// the list and through the watch.
func TestEtcdEmptyAndHugeKeysAndValues(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	ctx := testCtx(t)
	huge := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	longKey := strings.Repeat("k", 4096)
	put := func(k string, v []byte) core.ResourceVersion {
		r, err := c.Put(ctx, "/bad/"+k, string(v))
		if err != nil {
			t.Fatalf("put %.20q (%d bytes): %v", k, len(v), err)
		}
		return core.ResourceVersion(r.Header.Revision)
	}
	put("listed-huge", huge)
	put("", []byte("the prefix itself"))

	raw, err := etcdinformer.NewPrefix(ctx, c, "/bad", etcdinformer.Options[[]byte]{Codec: codec.Raw{}})
	if err != nil {
		t.Fatal(err)
	}
	rawInf, rawErrs := informertest.Run[[]byte](t, raw, core.InformerOptions[[]byte]{})
	type doc struct{ A int }
	js, err := etcdinformer.NewPrefix(ctx, c, "/bad", etcdinformer.Options[doc]{})
	if err != nil {
		t.Fatal(err)
	}
	jsInf, jsErrs := informertest.Run[doc](t, js, core.InformerOptions[doc]{})

	put("empty", nil)
	put(longKey, huge)
	rv := put("ok", []byte(`{"A":1}`))
	informertest.WaitFor(t, rawInf, rv)
	informertest.WaitFor(t, jsInf, rv)

	for _, k := range []string{"listed-huge", longKey} {
		if v, ok := rawInf.Lister().Get(k); !ok || !bytes.Equal(v, huge) {
			t.Errorf("key of %d bytes: cached %v with %d bytes, want the 1 MiB value", len(k), ok, len(v))
		}
	}
	if v, ok := rawInf.Lister().Get("empty"); !ok || len(v) != 0 {
		t.Errorf("empty value: cached %v %q, want an empty value", ok, v)
	}
	if _, ok := rawInf.Lister().Get(""); ok {
		t.Error("the key equal to the prefix is cached under the empty key")
	}
	decodeError(t, rawErrs, "") // the key equal to the prefix is reported, not dropped
	if _, ok := jsInf.Lister().Get("empty"); ok {
		t.Error("JSON: an empty value was cached")
	}
	if de := decodeError(t, jsErrs, "empty"); de.RV == 0 || !strings.Contains(de.Source, "/bad/") {
		t.Errorf("JSON: empty value not reported with source and version: %v", de)
	}
	if o, ok := jsInf.Lister().Get("ok"); !ok || o.A != 1 {
		t.Errorf("a good key next to bad ones: %v %v", ok, o)
	}
}

// NATS: values up to the server's max payload arrive intact; an empty
// value is reported as undecodable (JSON) and leaves the key absent; the
// rest of the bucket is unaffected.
func TestNATSEmptyAndHugeValues(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	ctx := testCtx(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	huge := bytes.Repeat([]byte("x"), 1<<20-4096) // just under MaxPayload with headers
	if _, err := kv.Put(ctx, "listed-huge", huge); err != nil {
		t.Fatal(err)
	}
	raw, err := natsinformer.NewKV(ctx, js, "bad", natsinformer.KVOptions[[]byte]{Codec: codec.Raw{}})
	if err != nil {
		t.Fatal(err)
	}
	rawInf, _ := informertest.Run[[]byte](t, raw, core.InformerOptions[[]byte]{})
	type doc struct{ A int }
	jsLW, err := natsinformer.NewKV(ctx, js, "bad", natsinformer.KVOptions[doc]{})
	if err != nil {
		t.Fatal(err)
	}
	jsInf, jsErrs := informertest.Run[doc](t, jsLW, core.InformerOptions[doc]{})

	if _, err := kv.Put(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "watched-huge", huge); err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "ok", []byte(`{"A":1}`))
	if err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, rawInf, core.ResourceVersion(rev))
	informertest.WaitFor(t, jsInf, core.ResourceVersion(rev))
	for _, k := range []string{"listed-huge", "watched-huge"} {
		if v, ok := rawInf.Lister().Get(k); !ok || !bytes.Equal(v, huge) {
			t.Errorf("%s: cached %v with %d bytes, want %d", k, ok, len(v), len(huge))
		}
	}
	if v, ok := rawInf.Lister().Get("empty"); !ok || len(v) != 0 {
		t.Errorf("raw empty value: cached %v %q", ok, v)
	}
	if _, ok := jsInf.Lister().Get("empty"); ok {
		t.Error("JSON: an empty value was cached")
	}
	decodeError(t, jsErrs, "empty")
	if o, ok := jsInf.Lister().Get("ok"); !ok || o.A != 1 {
		t.Errorf("a good key next to bad ones: %v %v", ok, o)
	}
}

// NATS: bucket and stream names with quotes, semicolons, spaces, dots and
// wildcards are rejected with an error naming them; none is interpreted as
// a pattern that reaches another bucket or stream.
func TestNATSHostileNames(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	ctx := testCtx(t)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "users"}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "events", Subjects: []string{"events.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"*", ">", "users.*", "us*", "users ", `users"`, "users;", "a b", "users.x", "", `"; DROP`} {
		if _, err := natsinformer.NewKV(ctx, js, name, natsinformer.KVOptions[[]byte]{}); err == nil {
			t.Errorf("bucket %q: accepted", name)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("bucket %q: error does not name it: %v", name, err)
		}
		_, err := natsinformer.NewEventStream(ctx, js, name, natsinformer.EventStreamOptions[[]byte]{
			Reduce: func(_ []byte, _ bool, m natsinformer.Message) ([]byte, bool, error) { return m.Data, true, nil },
		})
		if err == nil {
			t.Errorf("stream %q: accepted", name)
		}
	}
}

// Postgres: a row whose primary key is the empty string fails the List
// for good by default, and with SkipUndecodable is reported (the core has
// no place for an empty key), never silently dropped; a 4 MiB
// TOASTed value and a 2 KiB key arrive intact through the list and the
// stream; a schema whose name holds a quote, a semicolon, a dot and a space
// is quoted everywhere.
func TestPostgresEmptyAndHugeKeysAndValues(t *testing.T) {
	pg := harness.StartPostgres(t)
	schema := `s"; DROP TABLE keep; --. x`
	q := pgx.Identifier{schema, "t"}.Sanitize()
	pg.Exec(t, `CREATE TABLE keep (id int PRIMARY KEY); CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()+
		`; CREATE TABLE `+q+` (k text PRIMARY KEY, v text NOT NULL)`)
	ctx := testCtx(t)
	conn := pg.Conn(t)
	huge := strings.Repeat("0123456789abcdef", 1<<18) // 4 MiB
	longKey := strings.Repeat("k", 2048)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO `+q+` VALUES ('listed', $1), ('', 'empty key, listed')`, huge)

	src, err := pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	type row struct {
		K string `db:"k"`
		V string `db:"v"`
	}
	// By default a row that cannot be keyed fails the List for good,
	// naming why; with SkipUndecodable it is reported and left out.
	strict, err := pginformer.NewTable[row](ctx, src, "t", pginformer.TableOptions[row]{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	table, err := pginformer.NewTable[row](ctx, src, "t", pginformer.TableOptions[row]{Schema: schema, SkipUndecodable: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = strict.List(ctx, driver.ListSink[row]{Emit: func(driver.Event[row]) error { return nil }})
	if !errors.Is(err, driver.ErrPermanent) || !strings.Contains(err.Error(), "primary key is empty") {
		t.Errorf("List of a table with an empty primary key, without SkipUndecodable: %v; want a permanent error naming the empty key", err)
	}
	inf, e := informertest.Run[row](t, table, core.InformerOptions[row]{})

	exec(`INSERT INTO `+q+` VALUES ($1, $2), ('empty-value', '')`, longKey, huge)
	exec(`UPDATE ` + q + ` SET v = v || '!' WHERE k = ''`)
	exec(`UPDATE ` + q + ` SET k = k WHERE k = 'listed'`) // v unchanged: TOASTed, sent as "unchanged"
	var lsn pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, core.ResourceVersion(lsn))

	for _, k := range []string{"listed", longKey} {
		if r, ok := inf.Lister().Get(k); !ok || r.V != huge {
			t.Errorf("key of %d bytes: cached %v with a value of %d bytes, want %d", len(k), ok, len(r.V), len(huge))
		}
	}
	if r, ok := inf.Lister().Get("empty-value"); !ok || r.V != "" {
		t.Errorf("empty value: %v %q", ok, r.V)
	}
	if _, ok := inf.Lister().Get(""); ok {
		t.Error("the empty primary key is cached under the empty key")
	}
	decodeError(t, e, "") // the row with the empty primary key is reported, not dropped
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM keep`).Scan(&n); err != nil {
		t.Fatalf("table keep damaged by the schema name: %v", err)
	}
}

// Postgres: slot and publication names with quotes, semicolons, spaces
// and dots are either used quoted or refused with an error naming the
// problem; nothing is interpreted. A connection string with a password and
// TLS settings the server cannot satisfy fails without showing the
// password.
func TestPostgresHostileNamesAndSecrets(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE keep (id int PRIMARY KEY, v text)`)
	ctx := testCtx(t)
	type row struct {
		ID int    `db:"id"`
		V  string `db:"v"`
	}
	for _, slot := range []string{`s"; DROP TABLE keep; --`, "a b", "a.b", "UPPER", "x*"} {
		src, err := pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{Slot: slot, Publication: `p"; DROP TABLE keep; --`})
		if err == nil {
			var table *pginformer.Table[row]
			if table, err = pginformer.NewTable[row](ctx, src, "keep", pginformer.TableOptions[row]{}); err == nil {
				_, err = table.List(ctx, driver.ListSink[row]{Emit: func(driver.Event[row]) error { return nil }})
			}
			_ = src.Close()
		}
		if err == nil {
			t.Errorf("slot %q: accepted (Postgres allows only a-z, 0-9 and _)", slot)
		} else {
			t.Logf("slot %q: %v", slot, err)
		}
		var n int
		if err := pg.Conn(t).QueryRow(ctx, `SELECT count(*) FROM keep`).Scan(&n); err != nil {
			t.Fatalf("slot %q: table keep damaged: %v", slot, err)
		}
	}

	for _, mode := range []string{"require", "verify-full sslrootcert=/nonexistent/ca.pem"} {
		cs := pg.ConnString()
		cs = strings.Replace(cs, "sslmode=disable", "sslmode="+mode, 1)
		var logs strings.Builder
		_, err := pginformer.NewSource(ctx, cs, pginformer.Options{Logger: newTextLogger(&logs)})
		if err == nil {
			t.Errorf("sslmode=%s against a server without TLS: accepted", mode)
			continue
		}
		if strings.Contains(err.Error(), pg.Password) || strings.Contains(logs.String(), pg.Password) {
			t.Errorf("sslmode=%s: the password shows in the error or the log:\n%v\n%s", mode, err, logs.String())
		}
		t.Logf("sslmode=%s: %v", mode, err)
	}
}
