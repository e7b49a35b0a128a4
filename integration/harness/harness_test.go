package harness

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
