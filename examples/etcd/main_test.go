package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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
	all := exampletest.GetJSON[[]Service](t, base+"/services")
	if len(all) != 150 || all[3].Name != "svc-0003" || all[3].Team != "storage" {
		t.Errorf("/services: %d, [3] = %+v", len(all), all[min(3, len(all)-1)])
	}
	if got := exampletest.GetJSON[[]Service](t, base+"/services?team=payments"); len(got) != 38 { // 0, 4, ..., 148
		t.Errorf("/services?team=payments: %d services, want 38", len(got))
	}
	if s := exampletest.GetJSON[Service](t, base+"/services/svc-0010"); s.Healthy || s.Endpoint != "10.0.0.11:8443" {
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
	exampletest.EventuallyGet(t, base+"/services/billing", `"endpoint": "10.9.9.9:443"`)
	deadline := time.Now().Add(time.Minute)
	for {
		if code, _ := exampletest.Get(t, base+"/services/svc-0001"); code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("deleted svc-0001 still served")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := exampletest.GetJSON[[]Service](t, base+"/services?team=payments"); len(got) != 39 {
		t.Errorf("/services?team=payments after a put: %d, want 39", len(got))
	}

	_, metrics := exampletest.Get(t, base+"/metrics")
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
	exampletest.WaitOutput(t, out, "added billing:", 1)
	exampletest.WaitOutput(t, out, "deleted svc-0001 (team search)", 1)
	exampletest.WaitOutput(t, out, `key "broken"`, 1)
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
