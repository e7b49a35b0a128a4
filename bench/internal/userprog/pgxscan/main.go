// Command pgxscan is the plain program BenchmarkUserProgram compares the
// informer with: one pgx connection, one query of the table's rows
// scanned into a map by key.
//
//	pgxscan <conn string> <table>
//
// It prints userprog.Report's line once the scan ended, with the steps
// connected, first-row and scanned (seconds since exec).
package main

import (
	"context"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbinformer/dbinformer/bench/internal/userprog"
)

func main() { userprog.Main("pgxscan", run) }

func run(clk userprog.Clock, connString, table string) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	connected := time.Now()
	rows, err := conn.Query(ctx, "SELECT id, org, n, amount, at, attrs, body FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		return err
	}
	m := map[int64]userprog.Account{}
	var first time.Time
	for rows.Next() {
		if first.IsZero() {
			first = time.Now()
		}
		var a userprog.Account
		if err := rows.Scan(&a.ID, &a.Org, &a.N, &a.Amount, &a.At, &a.Attrs, &a.Body); err != nil {
			return err
		}
		m[a.ID] = a
	}
	if err := rows.Err(); err != nil {
		return err
	}
	scanned := time.Now()
	userprog.Report(os.Stdout, len(m), "connected-s", clk.Since(connected), "first-row-s", clk.Since(first), "scanned-s", clk.Since(scanned))
	return nil
}
