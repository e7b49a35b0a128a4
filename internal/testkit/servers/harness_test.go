package servers

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestFreePortIsBindable(t *testing.T) {
	p := FreePort(t)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		t.Fatalf("port %d from FreePort cannot be bound: %v", p, err)
	}
	l.Close()
	// Outside the ephemeral range, where outgoing connections take their
	// local ports.
	if p >= ephemeralLow() {
		t.Fatalf("port %d is in the ephemeral range (from %d)", p, ephemeralLow())
	}
}

func TestInCI(t *testing.T) {
	t.Setenv("CI", "true")
	if !InCI() {
		t.Fatal("CI=true not seen")
	}
	t.Setenv("CI", "")
	if InCI() {
		t.Fatal("empty CI seen as CI")
	}
}

// A port drawn by one process is not drawn again, by it or another
// process using the harness, until its claim is stale; a stale claim is
// taken over.
func TestClaimPort(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	if !claimPort(12345) {
		t.Fatal("a fresh port was not claimed")
	}
	if claimPort(12345) {
		t.Fatal("a claimed port was claimed again")
	}
	old := time.Now().Add(-2 * portHold)
	if err := os.Chtimes(filepath.Join(os.TempDir(), "dbinformer-ports", "12345"), old, old); err != nil {
		t.Fatal(err)
	}
	if !claimPort(12345) {
		t.Fatal("a stale claim was not taken over")
	}
	if claimPort(12345) {
		t.Fatal("the port taken over was claimed again")
	}
}
