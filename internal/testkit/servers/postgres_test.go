package servers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestPostgresSmoke(t *testing.T) {
	pg := StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := pg.Conn(t)
	var walLevel string
	if err := c.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		t.Fatal(err)
	}
	if walLevel != "logical" {
		t.Fatalf("wal_level = %q, want logical", walLevel)
	}
	pg.Exec(t, `CREATE TABLE smoke (id int PRIMARY KEY, v text)`)
	if _, err := c.Exec(ctx, `SELECT pg_create_logical_replication_slot('smoke', 'test_decoding')`); err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, `INSERT INTO smoke VALUES (1, 'hello')`)
	rows, err := c.Query(ctx, `SELECT data FROM pg_logical_slot_get_changes('smoke', NULL, NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	data, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(data, "\n"), "hello") {
		t.Fatalf("slot changes %q do not contain the insert", data)
	}

	// A replication connection with the password works over TCP.
	rc, err := pgx.Connect(ctx, pg.ReplicationConnString())
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	rc.Close(ctx)

	// Wrong password is refused: the server really checks passwords.
	bad := strings.Replace(pg.ConnString(), pg.Password, "wrong", 1)
	if c2, err := pgx.Connect(ctx, bad); err == nil {
		c2.Close(ctx)
		t.Fatal("connection with a wrong password succeeded; pg_hba does not check passwords")
	}

	pg.Restart(t, "immediate")
	pg.Exec(t, `INSERT INTO smoke VALUES (2, 'after restart')`)
	role := pg.CreateRole(t, "it's; role", "NOREPLICATION")
	c3, err := pgx.Connect(ctx, role)
	if err != nil {
		t.Fatalf("connect as created role: %v", err)
	}
	c3.Close(ctx)
}
