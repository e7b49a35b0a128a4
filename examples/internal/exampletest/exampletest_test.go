package exampletest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// A program that serves, prints, and returns nil once cancelled: the shape
// every example has.
func TestStartServeStop(t *testing.T) {
	p := Start(t, func(ctx context.Context, out io.Writer) error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
		})}
		go srv.Serve(ln)
		fmt.Fprintf(out, "serving http://%s (/x)\n", ln.Addr())
		fmt.Fprintln(out, "tick")
		fmt.Fprintln(out, "tick")
		<-ctx.Done()
		srv.Close()
		fmt.Fprintln(out, "stopped")
		return nil
	})
	base := p.BaseURL()
	got := GetJSON[map[string]string](t, base+"/abc")
	if got["path"] != "/abc" {
		t.Fatalf("GetJSON = %v", got)
	}
	EventuallyGet(t, base+"/def", `"/def"`)
	p.WaitOutput("tick", 2)
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	p.WaitOutput("stopped", 1)
}

// Stop returns the program's error, so a test can check a failing start.
func TestStopReturnsRunError(t *testing.T) {
	boom := errors.New("boom")
	p := Start(t, func(ctx context.Context, out io.Writer) error { return boom })
	if err := p.Stop(); !errors.Is(err, boom) {
		t.Fatalf("Stop = %v, want boom", err)
	}
}
