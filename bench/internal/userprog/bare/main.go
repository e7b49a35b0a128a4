// Command bare is the floor BenchmarkUserProgram holds the informer
// against: the least a program that keeps the table's rows typed must do.
// One pgconn connection (no snapshot, no slot, no pgx row machinery), one
// binary COPY of the table, each row decoded by hand into a
// userprog.Account, kept in a map by key made for the table's estimated
// rows, and one index map (org → keys), as the informer keeps one index:
//
//	bare <conn string> <table>
//
// It prints userprog.Report's line once the COPY ended, with the steps
// connected, first-row and scanned (seconds since exec).
//
// What it leaves out is what a floor may: the row's strings and numeric
// words are carved from shared blocks (no allocation a row), and a value
// the table cannot hold (NULL, NaN, infinity, a numeric of more than 18
// digits) is an error, not a case to decode.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dbinformer/dbinformer/bench/internal/userprog"
)

func run(clk userprog.Clock, connString, table string) error {
	ident := `"` + strings.ReplaceAll(table, `"`, `""`) + `"`
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, connString)
	connected := time.Now()
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	res := conn.ExecParams(ctx, "SELECT reltuples::bigint FROM pg_class WHERE oid = $1::regclass", [][]byte{[]byte(ident)}, nil, nil, nil).Read()
	if res.Err != nil {
		return res.Err
	}
	if len(res.Rows) != 1 {
		return fmt.Errorf("table %s not found", ident)
	}
	est, _ := strconv.Atoi(string(res.Rows[0][0]))
	r := &rows{
		byKey: make(map[int64]userprog.Account, max(est, 0)),
		byOrg: map[string][]int64{},
	}
	if _, err := conn.CopyTo(ctx, r, "COPY "+ident+" (id, org, n, amount, at, attrs, body) TO STDOUT (FORMAT binary)"); err != nil {
		return err
	}
	if !r.ended {
		return errors.New("the COPY ended before its trailer")
	}
	scanned := time.Now()
	userprog.Report(os.Stdout, len(r.byKey), "connected-s", clk.Since(connected), "first-row-s", clk.Since(r.first), "scanned-s", clk.Since(scanned))
	return nil
}

// rows is the io.Writer the COPY's data goes to: it keeps what does not
// make a whole row yet and decodes the rest.
type rows struct {
	byKey map[int64]userprog.Account
	byOrg map[string][]int64
	first time.Time

	held   []byte // the start of a row whose end has not come
	begun  bool   // the stream's header was read
	ended  bool   // its trailer was
	fields [7][]byte

	block []byte     // what the rows' strings and JSON are carved from
	words []bigWords // what their numerics' big.Ints are carved from
}

// bigWords is a big.Int with room for the one word of its value.
type bigWords struct {
	n big.Int
	w [1]big.Word
}

const blockSize = 64 << 10

func (r *rows) Write(p []byte) (int, error) {
	if len(r.held) == 0 {
		// The usual case: Postgres sends a row a message.
		used, err := r.rows(p)
		r.held = append(r.held, p[used:]...)
		return len(p), err
	}
	r.held = append(r.held, p...)
	used, err := r.rows(r.held)
	r.held = r.held[:copy(r.held, r.held[used:])]
	return len(p), err
}

// rows decodes the whole rows at the start of data and returns the bytes
// they took.
func (r *rows) rows(data []byte) (int, error) {
	at := 0
	if !r.begun {
		const sigLen = 11 // "PGCOPY\n\377\r\n\0"
		if len(data) < sigLen+8 {
			return 0, nil
		}
		at = sigLen + 8 + int(binary.BigEndian.Uint32(data[sigLen+4:]))
		if len(data) < at {
			return 0, nil
		}
		r.begun = true
	}
	for !r.ended && len(data)-at >= 2 {
		count := int16(binary.BigEndian.Uint16(data[at:]))
		if count == -1 {
			r.ended = true
			return at + 2, nil
		}
		if int(count) != len(r.fields) {
			return 0, fmt.Errorf("a row of %d fields", count)
		}
		end, whole := at+2, true
		for i := range r.fields {
			if len(data)-end < 4 {
				whole = false
				break
			}
			size := int(int32(binary.BigEndian.Uint32(data[end:])))
			end += 4
			if size < 0 || len(data)-end < size {
				if size < 0 {
					return 0, fmt.Errorf("column %d is NULL", i)
				}
				whole = false
				break
			}
			r.fields[i] = data[end : end+size]
			end += size
		}
		if !whole {
			break
		}
		if err := r.decode(); err != nil {
			return 0, err
		}
		at = end
	}
	return at, nil
}

// decode files the row in r.fields.
func (r *rows) decode() error {
	if r.first.IsZero() {
		r.first = time.Now()
	}
	f := &r.fields
	if len(f[0]) != 8 || len(f[2]) != 4 || len(f[4]) != 8 || len(f[5]) < 1 || f[5][0] != 1 {
		return errors.New("a field of the wrong size")
	}
	a := userprog.Account{
		ID:    int64(binary.BigEndian.Uint64(f[0])),
		Org:   r.str(f[1]),
		N:     int32(binary.BigEndian.Uint32(f[2])),
		At:    timestamptz(int64(binary.BigEndian.Uint64(f[4]))),
		Attrs: r.bytes(f[5][1:]),
		Body:  r.str(f[6]),
	}
	var err error
	if a.Amount, err = r.numeric(f[3]); err != nil {
		return err
	}
	r.byKey[a.ID] = a
	r.byOrg[a.Org] = append(r.byOrg[a.Org], a.ID)
	return nil
}

// bytes copies b into the current block.
func (r *rows) bytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if cap(r.block)-len(r.block) < len(b) {
		r.block = make([]byte, 0, max(blockSize, len(b)))
	}
	at := len(r.block)
	r.block = append(r.block, b...)
	return r.block[at:len(r.block):len(r.block)]
}

func (r *rows) str(b []byte) string {
	c := r.bytes(b)
	return unsafe.String(unsafe.SliceData(c), len(c))
}

// numeric decodes numeric's binary form (digits in base 10,000 from the
// weight down, and the display scale) into the Int and Exp of scale dscale.
func (r *rows) numeric(b []byte) (pgtype.Numeric, error) {
	if len(b) < 8 {
		return pgtype.Numeric{}, errors.New("a numeric of the wrong size")
	}
	ndigits := int(int16(binary.BigEndian.Uint16(b)))
	weight := int(int16(binary.BigEndian.Uint16(b[2:])))
	sign := binary.BigEndian.Uint16(b[4:])
	dscale := int(int16(binary.BigEndian.Uint16(b[6:])))
	if sign != 0 && sign != 0x4000 || len(b) != 8+2*ndigits || (weight+1)*4+dscale > 18 {
		return pgtype.Numeric{}, errors.New("a numeric beyond the floor's")
	}
	var v uint64
	for i := range ndigits {
		v = v*10000 + uint64(binary.BigEndian.Uint16(b[8+2*i:]))
	}
	exp := (weight - ndigits + 1) * 4
	for ; exp > -dscale; exp-- {
		v *= 10
	}
	for ; exp < -dscale; exp++ {
		v /= 10
	}
	if len(r.words) == 0 {
		r.words = make([]bigWords, 1024)
	}
	n := &r.words[0]
	r.words = r.words[1:]
	if bits.UintSize == 32 {
		n.n.SetUint64(v)
	} else {
		n.w[0] = big.Word(v)
		n.n.SetBits(n.w[:])
	}
	if sign == 0x4000 {
		n.n.Neg(&n.n)
	}
	return pgtype.Numeric{Int: &n.n, Exp: int32(-dscale), Valid: true}, nil
}

// pgEpoch is timestamptz's zero, 2000-01-01 UTC, in Unix seconds.
const pgEpoch = 946684800

// timestamptz is the time of us microseconds since pgEpoch, in time.Local
// as pgx gives it.
func timestamptz(us int64) time.Time {
	sec, rem := us/1e6, us%1e6
	if rem < 0 {
		sec, rem = sec-1, rem+1e6
	}
	return time.Unix(pgEpoch+sec, rem*1e3)
}

func main() { userprog.Main("bare", run) }
