package servers

import (
	"net"
	"strconv"
	"testing"
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
