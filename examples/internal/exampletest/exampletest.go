// Package exampletest runs the example programs in-process for their tests:
// each example is a run(ctx, cfg, out) function, and this package starts it,
// watches what it prints, talks to the HTTP server it announces, and stops
// it the way Ctrl-C does (by cancelling its context).
package exampletest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Deadline bounds every wait here. It is generous because the examples run
// against real servers on a loaded 2-core machine; it is not a speed claim.
const Deadline = 2 * time.Minute

// Output is an io.Writer that handlers, progress hooks and the program may
// write to at once, and that tests read while it is written.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// Program is one running example.
type Program struct {
	Out  *Output
	t    testing.TB
	done chan error
	stop func() error
}

// Start runs run(ctx, out) on its own goroutine until Stop (or the test's
// cleanup) cancels ctx.
func Start(t testing.TB, run func(ctx context.Context, out io.Writer) error) *Program {
	t.Helper()
	p := &Program{Out: &Output{}, t: t, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { p.done <- run(ctx, p.Out) }()
	var once sync.Once
	var err error
	p.stop = func() error {
		once.Do(func() {
			cancel() // what Ctrl-C does through signal.NotifyContext
			select {
			case err = <-p.done:
			case <-time.After(Deadline):
				t.Errorf("the program did not return after cancel:\n%s", p.Out.String())
			}
		})
		return err
	}
	t.Cleanup(func() { _ = p.stop() })
	return p
}

// Stop cancels the program's context and returns what run returned.
func (p *Program) Stop() error { return p.stop() }

var serving = regexp.MustCompile(`serving (http://[0-9.:]+)`)

// BaseURL waits until the program prints "serving http://host:port" and
// returns that URL. It fails the test if the program ends first.
func (p *Program) BaseURL() string {
	p.t.Helper()
	deadline := time.Now().Add(Deadline)
	for {
		if m := serving.FindStringSubmatch(p.Out.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-p.done:
			p.done <- err // Stop still wants it
			p.t.Fatalf("the program ended before serving: %v\n%s", err, p.Out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the program never served:\n%s", p.Out.String())
		}
	}
}

// WaitOutput waits until the output holds want at least n times.
func (p *Program) WaitOutput(want string, n int) {
	p.t.Helper()
	WaitOutput(p.t, p.Out, want, n)
}

// WaitOutput waits until out holds want at least n times: handlers print on
// their own goroutines.
func WaitOutput(t testing.TB, out interface{ String() string }, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(Deadline)
	for strings.Count(out.String(), want) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the output never held %q %d time(s):\n%s", want, n, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Get fetches url and returns the status code and body.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// GetJSON fetches url, requires 200, and decodes the body into a T.
func GetJSON[T any](t testing.TB, url string) T {
	t.Helper()
	code, body := Get(t, url)
	var v T
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, body)
	}
	return v
}

// EventuallyGet polls url until it answers 200 with a body containing want.
func EventuallyGet(t testing.TB, url, want string) {
	t.Helper()
	deadline := time.Now().Add(Deadline)
	for {
		code, body := Get(t, url)
		if code == http.StatusOK && strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s; want 200 with %q", url, code, body, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
