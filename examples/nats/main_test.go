package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/examples/internal/exampletest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// started runs the example until stop (what Ctrl-C does) and returns the
// HTTP base URL it announced.
func started(t *testing.T, cfg config) (base string, out *exampletest.Output, stop func() error) {
	t.Helper()
	p := exampletest.Start(t, func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
	return p.BaseURL(), p.Out, p.Stop
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
	all := exampletest.GetJSON[[]Item](t, base+"/items")
	if len(all) != 100 || all[42].SKU != "sku-00042" || all[42].Warehouse != "lis" || all[42].Qty != 94 {
		t.Errorf("/items: %d, [42] = %+v", len(all), all[min(42, len(all)-1)])
	}
	if got := exampletest.GetJSON[[]Item](t, base+"/items?warehouse=ams"); len(got) != 20 {
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
	exampletest.EventuallyGet(t, base+"/items/sku-00003", `"qty": 0`)
	deadline := time.Now().Add(time.Minute)
	for {
		if code, _ := exampletest.Get(t, base+"/items/sku-00004"); code == http.StatusNotFound {
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
	_, metrics := exampletest.Get(t, base+"/metrics")
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
	exampletest.WaitOutput(t, out, "updated sku-00003: qty 21 -> 0", 1)
	exampletest.WaitOutput(t, out, "deleted sku-00004 (was in osl)", 1)
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
