package main

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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/integration/harness"
)

// syncBuffer is written by handlers, progress hooks and run at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// started runs the example until the returned stop is called, and returns
// the HTTP base URL it printed.
func started(t *testing.T, cfg config) (base string, out *syncBuffer, stop func() error) {
	t.Helper()
	out = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, out) }()
	addr := regexp.MustCompile(`serving (http://[0-9.:]+) `)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if m := addr.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("run ended before serving: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("never served:\n%s", out.String())
		}
	}
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel() // what Ctrl-C does through signal.NotifyContext
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatalf("run did not return after cancel:\n%s", out.String())
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return base, out, stop
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func getJSON[T any](t *testing.T, url string) T {
	t.Helper()
	code, body := get(t, url)
	var v T
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, body)
	}
	return v
}

// eventuallyGet polls until url answers 200 with a body containing want.
func eventuallyGet(t *testing.T, url, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := get(t, url)
		if code == http.StatusOK && strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s; want 200 with %q", url, code, body, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitOutput waits, with a generous deadline, until the output holds want:
// handlers print on their own goroutines.
func waitOutput(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output never held %q:\n%s", want, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEtcdExample(t *testing.T) {
	// Checked after every cleanup (LIFO), once the server and clients are
	// gone: the embedded server's goroutines start lazily, so nothing
	// before its stop could tell ours from its.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	srv := harness.StartEtcd(t)
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A key outside the prefix, and one that does not decode, are reported
	// and skipped: the rest of the cache is unaffected.
	if _, err := cli.Put(ctx, "/elsewhere/x", `{"name":"x"}`); err != nil {
		t.Fatal(err)
	}

	prefix := "/test/services/"
	base, out, stop := started(t, config{endpoints: srv.Endpoints(), prefix: prefix, listen: "127.0.0.1:0", seed: 150})
	if !strings.Contains(out.String(), "synced 150 services at revision ") {
		t.Errorf("output:\n%s", out.String())
	}
	all := getJSON[[]Service](t, base+"/services")
	if len(all) != 150 || all[3].Name != "svc-0003" || all[3].Team != "storage" {
		t.Errorf("/services: %d, [3] = %+v", len(all), all[min(3, len(all)-1)])
	}
	if got := getJSON[[]Service](t, base+"/services?team=payments"); len(got) != 38 { // 0, 4, ..., 148
		t.Errorf("/services?team=payments: %d services, want 38", len(got))
	}
	if s := getJSON[Service](t, base+"/services/svc-0010"); s.Healthy || s.Endpoint != "10.0.0.11:8443" {
		t.Errorf("/services/svc-0010 = %+v", s)
	}

	if _, err := cli.Put(ctx, prefix+"billing", `{"name":"billing","team":"payments","endpoint":"10.9.9.9:443","healthy":true}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, prefix+"broken", `{not json`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, prefix+"svc-0001"); err != nil {
		t.Fatal(err)
	}
	eventuallyGet(t, base+"/services/billing", `"endpoint": "10.9.9.9:443"`)
	deadline := time.Now().Add(time.Minute)
	for {
		if code, _ := get(t, base+"/services/svc-0001"); code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("deleted svc-0001 still served")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := getJSON[[]Service](t, base+"/services?team=payments"); len(got) != 39 {
		t.Errorf("/services?team=payments after a put: %d, want 39", len(got))
	}

	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{
		`dbinformer_informer_listed_objects{informer="services"} 150`,
		`dbinformer_informer_decode_errors_total{informer="services"} 1`,
		`dbinformer_informer_lag{informer="services"}`,
		`dbinformer_informer_head_resource_version{informer="services"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	waitOutput(t, out, "added billing:")
	waitOutput(t, out, "deleted svc-0001 (team search)")
	waitOutput(t, out, `key "broken"`)
	if err := stop(); err != nil {
		t.Fatalf("run after Ctrl-C: %v\n%s", err, out.String())
	}
	for _, want := range []string{"added billing:", "deleted svc-0001 (team search)", `key "broken"`, "stopping\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	t.Logf("output:\n%s", out.String())

	// -seed again leaves the existing data alone.
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	before := resp.Count
	if err := seed(ctx, cli, config{prefix: prefix, seed: 150}); err != nil {
		t.Fatal(err)
	}
	if resp, err = cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != before {
		t.Errorf("second -seed: %d keys, want %d (%v)", resp.Count, before, err)
	}
}
