package pginformer_test

import (
	"context"
	"fmt"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/jackc/pgx/v5"
)

type User struct {
	ID    int64  `db:"id"`
	Name  string `db:"name"`
	Admin bool   `db:"admin"`
}

// Example keeps an indexed, typed cache of a table, and reads its own
// write with WaitFor(pginformer.CommitToken(...)).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connString := examplePG.ConnString() // a role with REPLICATION and SELECT

	db, err := pgx.Connect(ctx, connString)
	if err != nil {
		panic(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, `CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL, admin bool NOT NULL DEFAULT false)`); err != nil {
		panic(err)
	}

	// One Source per database: one slot and one walsender, however many tables.
	src, err := pginformer.NewSource(ctx, connString, pginformer.Options{})
	if err != nil {
		panic(err)
	}
	defer src.Close()
	usersTable, err := pginformer.NewTable[User](ctx, src, "users", pginformer.TableOptions[User]{})
	if err != nil {
		panic(err)
	}

	users := core.NewSharedIndexInformer[User](usersTable, core.InformerOptions[User]{
		Name: "users",
		Indexers: core.Indexers[User]{"admin": func(u User) ([]string, error) {
			return []string{fmt.Sprint(u.Admin)}, nil
		}},
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = users.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	if err := users.WaitForCacheSync(ctx); err != nil {
		panic(err)
	}

	if _, err := db.Exec(ctx, `INSERT INTO users VALUES (1, 'Ada Lovelace', true), (2, 'Charles Babbage', false)`); err != nil {
		panic(err)
	}
	lsn, err := pginformer.CommitToken(ctx, db) // after the commit: right under any synchronous_commit
	if err != nil {
		panic(err)
	}
	if err := users.WaitFor(ctx, lsn); err != nil {
		panic(err)
	}
	ada, _ := users.Lister().Get("1")
	admins, _ := users.Lister().ByIndex("admin", "true")
	fmt.Println(ada.Name, len(admins))
	// Output: Ada Lovelace 1
}

// Balance maps two of the columns of table accounts: List reads only
// those, and with Options.PublishColumnList (Postgres 15 and later) the
// Source's publication sends only those, so the large notes column never
// reaches the process.
type Balance struct {
	ID    int64 `db:"id"`
	Cents int64 `db:"cents"`
}

// ExampleNewTable_partial syncs a column subset of the rows in a key
// range: the range goes into the List's query and, with
// Options.PublishRowFilter (Postgres 15+), the publication's row filter, so
// changes of other rows are not sent at all. Both publication options
// constrain the table's migrations while the Source runs (see their docs):
// this table's schema is frozen.
func ExampleNewTable_partial() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connString := examplePG.ConnString()
	db, err := pgx.Connect(ctx, connString)
	if err != nil {
		panic(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, `CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL, cents bigint NOT NULL, notes text);
		INSERT INTO accounts SELECT i, 'owner ' || i, i * 100, repeat('n', 10000) FROM generate_series(1, 1000) i`); err != nil {
		panic(err)
	}
	src, err := pginformer.NewSource(ctx, connString, pginformer.Options{PublishColumnList: true, PublishRowFilter: true})
	if err != nil {
		panic(err)
	}
	defer src.Close()
	firstTen, err := pginformer.NewTable[Balance](ctx, src, "accounts", pginformer.TableOptions[Balance]{
		Where: filter.MustNew[Balance](filter.Le("id", 10)),
	})
	if err != nil {
		panic(err)
	}
	balances := core.NewSharedIndexInformer[Balance](firstTen, core.InformerOptions[Balance]{Name: "balances"})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = balances.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	if err := balances.WaitForCacheSync(ctx); err != nil {
		panic(err)
	}
	if _, err := db.Exec(ctx, `UPDATE accounts SET cents = cents + 1 WHERE id IN (3, 500)`); err != nil {
		panic(err)
	}
	lsn, err := pginformer.CommitToken(ctx, db) // after the commit: right under any synchronous_commit
	if err != nil {
		panic(err)
	}
	if err := balances.WaitFor(ctx, lsn); err != nil {
		panic(err)
	}
	three, _ := balances.Lister().Get("3")
	fmt.Println(balances.Lister().Len(), three.Cents)
	// Output: 10 301
}

// Visit is a row of table visits.
type Visit struct {
	ID    int64 `db:"id"`
	Count int64 `db:"count"`
}

// ExampleTableOptions_onSchemaChange widens a column under a running
// informer: the Source proves the mapping again (an int64 holds a bigint),
// the informer lists the table again, and the cache holds the values the
// migration rewrote. With pginformer.FailOnSchemaChange as the policy the
// informer would stop instead.
func ExampleTableOptions_onSchemaChange() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connString := examplePG.ConnString()
	db, err := pgx.Connect(ctx, connString)
	if err != nil {
		panic(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, `CREATE TABLE visits (id bigint PRIMARY KEY, count int4 NOT NULL); INSERT INTO visits VALUES (1, 5)`); err != nil {
		panic(err)
	}
	src, err := pginformer.NewSource(ctx, connString, pginformer.Options{})
	if err != nil {
		panic(err)
	}
	defer src.Close()
	table, err := pginformer.NewTable[Visit](ctx, src, "visits", pginformer.TableOptions[Visit]{
		OnSchemaChange: func(e *pginformer.SchemaChangeError) pginformer.SchemaAction {
			return pginformer.SchemaRelist // the default, spelled out
		},
	})
	if err != nil {
		panic(err)
	}
	visits := core.NewSharedIndexInformer[Visit](table, core.InformerOptions[Visit]{Name: "visits"})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = visits.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	if err := visits.WaitForCacheSync(ctx); err != nil {
		panic(err)
	}
	if _, err := db.Exec(ctx, `ALTER TABLE visits ALTER COLUMN count TYPE bigint USING count * 1000; UPDATE visits SET count = count + 1`); err != nil {
		panic(err)
	}
	lsn, err := pginformer.CommitToken(ctx, db)
	if err != nil {
		panic(err)
	}
	if err := visits.WaitFor(ctx, lsn); err != nil {
		panic(err)
	}
	one, _ := visits.Lister().Get("1")
	change := table.LastSchemaChange()
	fmt.Println(one.Count, change.Column, change.Action == pginformer.SchemaRelist)
	// Output: 5001 count true
}

// Stock is a row of table stock.
type Stock struct {
	SKU string `db:"sku"`
	Qty int64  `db:"qty"`
}

// ExampleTable_AuditList turns on the consistency audit of an informer
// over a Table (core.InformerOptions.Audit; AuditNow runs one at once):
// the audit reads the table inside the snapshot of a temporary slot of its
// own, at that slot's LSN, compares it with the cache and heals what
// differs. The slot is gone once the run returns.
func ExampleTable_AuditList() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connString := examplePG.ConnString()
	db, err := pgx.Connect(ctx, connString)
	if err != nil {
		panic(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, `CREATE TABLE stock (sku text PRIMARY KEY, qty bigint NOT NULL);
		INSERT INTO stock SELECT 'sku-' || i, i FROM generate_series(1, 500) i`); err != nil {
		panic(err)
	}
	src, err := pginformer.NewSource(ctx, connString, pginformer.Options{})
	if err != nil {
		panic(err)
	}
	defer src.Close()
	stockTable, err := pginformer.NewTable[Stock](ctx, src, "stock", pginformer.TableOptions[Stock]{})
	if err != nil {
		panic(err)
	}
	stock := core.NewSharedIndexInformer[Stock](stockTable, core.InformerOptions[Stock]{
		Name: "stock",
		// Every 10 minutes (and a fifth more at random), at most 20,000
		// rows a second, healing the keys that differ: the zero
		// AuditOptions.
		Audit: &core.AuditOptions[Stock]{},
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = stock.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()

	r := stock.AuditNow(ctx) // waits for the cache to sync
	fmt.Println(r.Outcome, r.Rows, r.Divergent())
	var slots int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'dbinformer_audit_%'`).Scan(&slots); err != nil {
		panic(err)
	}
	fmt.Println("audit slots left:", slots)
	// Output:
	// equal 500 0
	// audit slots left: 0
}
