package core

import (
	"bytes"
	"io"
	"strconv"
	"testing"

	"github.com/dbinformer/dbinformer/core/codec"
)

// ckptRow is the shape of bench's pgRow: a key, two short texts, an int
// and a 32-character note.
type ckptRow struct {
	ID   int64
	Org  string
	Team string
	N    int32
	Note string
}

func ckptRows(n int) ([]string, []ckptRow) {
	keys, objs := make([]string, n), make([]ckptRow, n)
	for i := range n {
		keys[i] = strconv.Itoa(i + 1)
		objs[i] = ckptRow{ID: int64(i + 1), Org: "org-" + strconv.Itoa(i%100), Team: "team-" + strconv.Itoa(i%1000), N: int32(i), Note: "0123456789abcdef0123456789abcdef"}
	}
	return keys, objs
}

// BenchmarkCheckpoint measures a checkpoint of 100,000 rows (10,000 under
// -short): save (encode, to memory), decode, lazy (decode for a lazy load:
// the keys only, with Binary), and load (decode and fill an empty indexer
// with two indexes), with the JSON and the Binary codec. Per op: the whole
// checkpoint.
func BenchmarkCheckpoint(b *testing.B) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	keys, objs := ckptRows(n)
	bin, err := codec.NewBinary[ckptRow]()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		codec codec.Codec[ckptRow]
	}{{"json", codec.JSON[ckptRow]{}}, {"binary", bin}} {
		var buf bytes.Buffer
		if err := encodeCheckpoint(&buf, c.codec, "x", 7, keys, objs, nil); err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/save", func(b *testing.B) {
			b.ReportMetric(float64(buf.Len())/float64(n), "B/object")
			for b.Loop() {
				if err := encodeCheckpoint(io.Discard, c.codec, "x", 7, keys, objs, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/decode", func(b *testing.B) {
			for b.Loop() {
				if _, _, err := decodeCheckpoint(bytes.NewReader(buf.Bytes()), c.codec, "x", false, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/lazy", func(b *testing.B) {
			for b.Loop() {
				if _, _, err := decodeCheckpoint(bytes.NewReader(buf.Bytes()), c.codec, "x", true, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/load", func(b *testing.B) {
			for b.Loop() {
				_, l, err := decodeCheckpoint(bytes.NewReader(buf.Bytes()), c.codec, "x", false, nil)
				if err != nil {
					b.Fatal(err)
				}
				s := NewIndexer(Indexers[ckptRow]{
					"org":  func(o ckptRow) ([]string, error) { return []string{o.Org}, nil },
					"team": func(o ckptRow) ([]string, error) { return []string{o.Team}, nil },
				})
				if ok, _ := s.loadEmpty(l.base); !ok {
					b.Fatal("not loaded")
				}
			}
		})
	}
}
