package kubeinformer_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

func rv(t testing.TB, s string) core.ResourceVersion {
	t.Helper()
	v, err := driver.ParseResourceVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// debugLogger is testLogger with the adapter's debug lines.
func debugLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
