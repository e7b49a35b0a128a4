package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/examples/internal/exampletest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// Status is what the reconcile records for an app.
type Status struct {
	ObservedImage    string `json:"observedImage"`
	ObservedReplicas int    `json:"observedReplicas"`
	Attempts         int    `json:"attempts"`
}

// start runs the controller until stop (what Ctrl-C does).
func start(t *testing.T, args ...string) (out *exampletest.Output, stop func() error) {
	t.Helper()
	p := exampletest.Start(t, func(ctx context.Context, out io.Writer) error { return run(ctx, args, out) })
	return p.Out, p.Stop
}

func TestController(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the server and clients stopped
	srv := harness.StartEtcd(t)
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	status := func(name string) (Status, bool) {
		t.Helper()
		resp, err := cli.Get(ctx, statusPrefix+name)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return Status{}, false
		}
		var s Status
		if err := json.Unmarshal(resp.Kvs[0].Value, &s); err != nil {
			t.Fatal(err)
		}
		return s, true
	}

	endpoints := strings.Join(srv.Endpoints(), ",")
	out, stop := start(t, "-endpoints", endpoints, "-listen", "127.0.0.1:0", "-workers", "2", "-seed",
		"-flaky", "api", "-fail", "3", "-base-delay", "1ms", "-max-retries", "5")
	// Retries back off exponentially per key, then Forget resets the key.
	exampletest.WaitOutput(t, out, "reconcile api: image=api:2.4.1 replicas=2 -> status written (attempt 4)", 1)
	for _, want := range []string{
		`msg="caches synced" manager=controller controllers=1`,
		`controller "apps": reconcile api: simulated backend failure (1 of 3); retry 1 in 1ms`,
		`controller "apps": reconcile api: simulated backend failure (2 of 3); retry 2 in 2ms`,
		`controller "apps": reconcile api: simulated backend failure (3 of 3); retry 3 in 4ms`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The other worker handles the other apps meanwhile.
	exampletest.WaitOutput(t, out, "reconcile web: image=nginx:1.27 replicas=3 -> status written (attempt 1)", 1)
	exampletest.WaitOutput(t, out, "reconcile worker: image=worker:2.4.1 replicas=5 -> status written (attempt 1)", 1)
	if s, ok := status("api"); !ok || s.Attempts != 4 || s.ObservedReplicas != 2 {
		t.Errorf("status of api = %+v (present %v)", s, ok)
	}

	m := regexp.MustCompile(`url=(http://[0-9.:]+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no metrics address:\n%s", out.String())
	}
	resp, err := http.Get(m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`dbinformer_workqueue_retries_total{name="apps"} 3`,
		`dbinformer_workqueue_depth{name="apps"}`,
		`dbinformer_workqueue_adds_total{name="apps"}`,
		`dbinformer_workqueue_work_duration_seconds_count{name="apps"}`,
		`dbinformer_informer_listed_objects{informer="apps"} 3`,
		`dbinformer_controller_reconciles_total{controller="apps",result="error"} 3`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// After Forget, the next failure of api starts from the shortest delay.
	if _, err := cli.Put(ctx, appsPrefix+"api", `{"image":"api:2.5.0","replicas":4}`); err != nil {
		t.Fatal(err)
	}
	exampletest.WaitOutput(t, out, "reconcile api: image=api:2.5.0 replicas=4 -> status written (attempt 4)", 1)
	if n := strings.Count(out.String(), "; retry 1 in 1ms"); n != 2 {
		t.Errorf("%d first retries at 1ms, want 2 (Forget resets the backoff)", n)
	}
	if s, _ := status("api"); s.ObservedImage != "api:2.5.0" || s.ObservedReplicas != 4 {
		t.Errorf("status of api after update = %+v", s)
	}

	if _, err := cli.Delete(ctx, appsPrefix+"web"); err != nil {
		t.Fatal(err)
	}
	exampletest.WaitOutput(t, out, "reconcile web: app deleted; removed its status", 1)
	if _, ok := status("web"); ok {
		t.Error("status of deleted app web still there")
	}
	if err := stop(); err != nil {
		t.Fatalf("run after Ctrl-C: %v", err)
	}
	if !strings.HasSuffix(out.String(), "\nstopped\n") {
		t.Errorf("no clean stop:\n%s", out.String())
	}
	t.Logf("output:\n%s", out.String())

	// A key that keeps failing is dropped after max-retries.
	out, stop = start(t, "-endpoints", endpoints, "-listen", "", "-workers", "1",
		"-flaky", "api", "-fail", "10", "-base-delay", "1ms", "-max-retries", "2")
	exampletest.WaitOutput(t, out, `controller "apps": reconcile api: simulated backend failure (3 of 10); giving the key up after 2 retries`, 1)
	if err := stop(); err != nil {
		t.Fatalf("second run after Ctrl-C: %v", err)
	}
	if strings.Contains(out.String(), "(4 of 10)") {
		t.Errorf("a dropped key was retried:\n%s", out.String())
	}
}
