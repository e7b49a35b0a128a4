package pginformer

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Catalog lookups of NewTable: the table, its key, its columns and its
// place in the publication. No state of the Source is touched here.

// column is one column of a table as the catalog describes it.
type column struct {
	name      string
	oid       uint32
	typmod    int32  // atttypmod: -1 for none
	typname   string // format_type with the type modifier: numeric(5,2), character varying(20)
	qname     string // schema.typname, as pgx.Conn.LoadTypes wants it
	notNull   bool
	generated bool
	typtype   string // b base, e enum, d domain, c composite, r range...
	category  string // typcategory: A array, N numeric...
	base      uint32 // the base type of a domain, else oid
	elem      uint32 // the element type of an array (of the base type), else 0
}

// lookupTable fills st from the catalog and checks what NewTable promises:
// the table exists, the role may read it, it has a primary key and a
// usable replica identity.
func (s *Source) lookupTable(ctx context.Context, conn *pgx.Conn, st *tableState) error {
	ident := st.ident.Sanitize()
	var relkind, replident string
	var canSelect bool
	err := conn.QueryRow(ctx, `SELECT c.oid, c.relkind::text, c.relreplident::text, has_table_privilege(c.oid, 'SELECT')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, st.schema, st.name).Scan(&st.oid, &relkind, &replident, &canSelect)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres %s: table %s does not exist", s.where(), ident)
	}
	if err != nil {
		return s.wrap("look up table "+ident, err)
	}
	switch relkind {
	case "r":
	case "p":
		st.partitioned = true
	default:
		return fmt.Errorf("postgres %s: %s is not a table (relkind %q): only tables and partitioned tables can be replicated", s.where(), ident, relkind)
	}
	if !canSelect {
		return fmt.Errorf("postgres %s: role %q has no SELECT privilege on table %s (GRANT SELECT ON %s TO %s)", s.where(), s.connCfg.User, ident, ident, pgx.Identifier{s.connCfg.User}.Sanitize())
	}
	rows, _ := conn.Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = $1 AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, st.oid)
	st.pk, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return s.wrap("read primary key of "+ident, err)
	}
	if len(st.pk) == 0 {
		// Under FULL the whole row could serve as a key, but two equal rows
		// would then be one object: a primary key is required either way.
		return fmt.Errorf("postgres %s: table %s has no primary key; cache keys come from the primary key, under REPLICA IDENTITY DEFAULT and FULL alike (ALTER TABLE %s ADD PRIMARY KEY (...))", s.where(), ident, ident)
	}
	switch replident {
	case "d":
	case "f":
		st.full = true
	default:
		return fmt.Errorf("postgres %s: table %s has REPLICA IDENTITY %s; use DEFAULT or FULL (ALTER TABLE %s REPLICA IDENTITY DEFAULT)", s.where(), ident, map[string]string{"n": "NOTHING", "i": "USING INDEX"}[replident], ident)
	}
	return nil
}

// columns reads the table's live columns in order.
func columns(ctx context.Context, conn *pgx.Conn, oid uint32) ([]column, error) {
	rows, _ := conn.Query(ctx, `SELECT a.attname, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod),
			tn.nspname || '.' || ty.typname, a.attnotnull, a.attgenerated <> '',
			ty.typtype::text, ty.typcategory::text,
			CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE ty.oid END,
			COALESCE(bt.typelem, 0)
		FROM pg_attribute a JOIN pg_type ty ON ty.oid = a.atttypid JOIN pg_namespace tn ON tn.oid = ty.typnamespace
		LEFT JOIN pg_type bt ON bt.oid = CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE ty.oid END
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, oid)
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.name, &c.oid, &c.typmod, &c.typname, &c.qname, &c.notNull, &c.generated, &c.typtype, &c.category, &c.base, &c.elem)
		return c, err
	})
}

// checkPublication checks that a publication this Source did not create
// carries the table's changes under the table's own relation id.
func (s *Source) checkPublication(ctx context.Context, conn *pgx.Conn, st *tableState) error {
	ident, pub := st.ident.Sanitize(), pgx.Identifier{s.pub}.Sanitize()
	var viaRoot bool
	err := conn.QueryRow(ctx, "SELECT pubviaroot FROM pg_publication WHERE pubname = $1", s.pub).Scan(&viaRoot)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres %s: publication %q does not exist", s.where(), s.pub)
	}
	if err != nil {
		return s.wrap("look up publication", err)
	}
	if st.partitioned && !viaRoot {
		return fmt.Errorf("postgres %s: table %s is partitioned, and publication %q sends its rows' changes under the partitions' names, which this table never sees (ALTER PUBLICATION %s SET (publish_via_partition_root = true))", s.where(), ident, s.pub, pub)
	}
	var member bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)", s.pub, st.schema, st.name).Scan(&member); err != nil {
		return s.wrap("look up publication tables", err)
	}
	if member {
		return nil
	}
	if viaRoot {
		var root string
		err := conn.QueryRow(ctx, `SELECT quote_ident(pt.schemaname) || '.' || quote_ident(pt.tablename)
			FROM pg_partition_ancestors($1::oid::regclass) a JOIN pg_class c ON c.oid = a.relid JOIN pg_namespace n ON n.oid = c.relnamespace
			JOIN pg_publication_tables pt ON pt.pubname = $2 AND pt.schemaname = n.nspname AND pt.tablename = c.relname
			WHERE a.relid <> $1::oid::regclass LIMIT 1`, st.oid, s.pub).Scan(&root)
		if err == nil {
			return fmt.Errorf("postgres %s: partition %s is published through its partitioned table %s (publication %q has publish_via_partition_root = true), so its changes never arrive under its own name: sync %s instead, or use a publication that lists the partition and not its root", s.where(), ident, root, s.pub, root)
		}
	}
	return fmt.Errorf("postgres %s: publication %q does not include table %s (ALTER PUBLICATION %s ADD TABLE %s)", s.where(), s.pub, ident, pub, ident)
}

// checkPartitionFamily refuses a table whose partitioned root or partition
// is already registered with a Source that publishes through the root: the
// partition's changes would arrive under the root's name only.
func (s *Source) checkPartitionFamily(ctx context.Context, conn *pgx.Conn, st *tableState) error {
	rows, _ := conn.Query(ctx, `SELECT relid::oid, relid::regclass::text FROM pg_partition_ancestors($1::oid::regclass)
		UNION SELECT relid::oid, relid::regclass::text FROM pg_partition_tree($1::oid::regclass)`, st.oid)
	type rel struct {
		oid  uint32
		name string
	}
	family, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (rel, error) {
		var r rel
		err := row.Scan(&r.oid, &r.name)
		return r, err
	})
	if err != nil {
		return s.wrap("look up the partitions of "+st.ident.Sanitize(), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range family {
		if r.oid != st.oid && len(s.byOID[r.oid]) > 0 {
			return fmt.Errorf("pginformer: table %s and %s are one partition tree: a Source's publication sends a partition's changes under its root's name (publish_via_partition_root), so they cannot be synced by one Source; use a Source for each", st.ident.Sanitize(), r.name)
		}
	}
	return nil
}
