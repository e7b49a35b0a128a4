package main

import (
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	for _, c := range []struct {
		received, estimated int64
		elapsed             time.Duration
		want                string
	}{
		{120_000, 1_000_000, 3 * time.Second, "orders: initial sync 120000 of ~1000000 rows (12%), 40000 rows/s, about 22s left"},
		{5_000, 0, time.Second, "orders: initial sync 5000 rows, 5000 rows/s"},
		{1_200, 1_000, time.Second, "orders: initial sync 1200 of ~1000 rows (100%), 1200 rows/s"},
		{0, 1_000, time.Second, "orders: initial sync 0 of ~1000 rows (0%)"},
	} {
		if got := progressLine("orders", c.received, c.estimated, c.elapsed); got != c.want {
			t.Errorf("progressLine(%d, %d, %v) = %q, want %q", c.received, c.estimated, c.elapsed, got, c.want)
		}
	}
}
