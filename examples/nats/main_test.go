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

func TestNATSExample(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the server and clients stopped
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	base, out, stop := started(t, config{url: srv.URL(), bucket: "inv_test", listen: "127.0.0.1:0", init: true, items: 100})
	if !strings.Contains(out.String(), `synced 100 items from bucket "inv_test" at revision 100`) {
		t.Errorf("output:\n%s", out.String())
	}
	all := getJSON[[]Item](t, base+"/items")
	if len(all) != 100 || all[42].SKU != "sku-00042" || all[42].Warehouse != "lis" || all[42].Qty != 94 {
		t.Errorf("/items: %d, [42] = %+v", len(all), all[min(42, len(all)-1)])
	}
	if got := getJSON[[]Item](t, base+"/items?warehouse=ams"); len(got) != 20 {
		t.Errorf("/items?warehouse=ams: %d items, want 20", len(got))
	}

	kv, err := js.KeyValue(ctx, "inv_test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "sku-00003", []byte(`{"sku":"sku-00003","warehouse":"waw","qty":0}`)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "sku-00004"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "bad", []byte(`[1,2`)); err != nil {
		t.Fatal(err)
	}
	eventuallyGet(t, base+"/items/sku-00003", `"qty": 0`)
	deadline := time.Now().Add(time.Minute)
	for {
		if code, _ := get(t, base+"/items/sku-00004"); code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("deleted sku-00004 still served")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for !strings.Contains(out.String(), `key "bad"`) { // the undecodable value, reported after the delete
		if time.Now().After(deadline) {
			t.Fatalf("undecodable value never reported:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{
		`dbinformer_informer_listed_objects{informer="items"} 100`,
		`dbinformer_informer_lists_total{informer="items",kind="list",result="success"} 1`,
		`dbinformer_informer_head_resource_version{informer="items"} 103`,
		`dbinformer_informer_decode_errors_total{informer="items"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	waitOutput(t, out, "updated sku-00003: qty 21 -> 0")
	waitOutput(t, out, "deleted sku-00004 (was in osl)")
	if err := stop(); err != nil {
		t.Fatalf("run after Ctrl-C: %v\n%s", err, out.String())
	}
	for _, want := range []string{"updated sku-00003: qty 21 -> 0", "deleted sku-00004 (was in osl)", `key "bad"`, "stopping\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	t.Logf("output:\n%s", out.String())

	// -init on a bucket that has values leaves them alone.
	if err := initBucket(ctx, js, config{bucket: "inv_test", items: 100}); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "sku-00003"); err != nil || !strings.Contains(string(e.Value()), `"qty":0`) {
		t.Errorf("second -init rewrote sku-00003: %v", err)
	}
}
