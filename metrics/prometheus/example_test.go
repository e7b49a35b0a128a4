package prommetrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
	prommetrics "github.com/dbinformer/dbinformer/metrics/prometheus"
)

// An informer reporting to a registry of its own, served on /metrics.
func Example() {
	reg := prometheus.NewRegistry()
	pm, err := prommetrics.New(reg, prommetrics.Options{})
	if err != nil {
		panic(err)
	}
	src := memory.New[string](memory.Options{})
	src.Put("greeting", "hello")
	inf := core.NewSharedIndexInformer[string](src, core.InformerOptions[string]{Name: "greetings", Metrics: pm})
	pm.TrackLag(inf) // head and lag, read through the informer

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		panic(err)
	}

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(body), "\n") {
		// Listed is reported before the cache is filled, so these are
		// final once WaitForCacheSync returned. (Applied and lag follow
		// a moment later; scrape them on Prometheus' schedule.)
		if strings.HasPrefix(line, "dbinformer_informer_lists_total") ||
			strings.HasPrefix(line, "dbinformer_informer_listed_objects") {
			fmt.Println(line)
		}
	}
	// Output:
	// dbinformer_informer_listed_objects{informer="greetings"} 1
	// dbinformer_informer_lists_total{informer="greetings",kind="list",result="error"} 0
	// dbinformer_informer_lists_total{informer="greetings",kind="list",result="success"} 1
	// dbinformer_informer_lists_total{informer="greetings",kind="relist",result="error"} 0
	// dbinformer_informer_lists_total{informer="greetings",kind="relist",result="success"} 0
}
