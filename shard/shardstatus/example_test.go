package shardstatus_test

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbinformer/dbinformer/shard"
	"github.com/dbinformer/dbinformer/shard/shardstatus"
)

// A Recorder as a Sharder's Observer (shard.Options.Observer) sees what
// the Sharder does; here its calls are made by hand.
func ExampleRecorder() {
	rec := shardstatus.New("replica-a")
	reg := prometheus.NewRegistry()
	if err := rec.Register(reg); err != nil {
		panic(err)
	}
	var obs shard.Observer = rec
	obs.Members([]shard.Member{{ID: "replica-b"}, {ID: "replica-a"}})
	obs.HandoffStarted(3, true)
	obs.HandoffDone(3, true, 40*time.Millisecond, nil)
	obs.HandoffStarted(5, true)
	obs.HandoffStarted(7, false)
	obs.HandoffDone(7, false, time.Second, errors.New("work in flight outlived the drain timeout"))
	obs.Owned(map[int]uint64{3: 1042})

	st := rec.Status()
	fmt.Println("members:", st.Members)
	fmt.Println("owned:", st.Owned)
	for _, h := range st.InProgress {
		fmt.Println("in progress: shard", h.Shard, "in:", h.In)
	}
	for _, h := range st.Recent {
		fmt.Println(strings.TrimSpace(fmt.Sprintln("done: shard", h.Shard, "in:", h.In, "took", h.Duration, h.Err)))
	}
	w := httptest.NewRecorder()
	rec.ServeHTTP(w, httptest.NewRequest("GET", "/debug/shards", nil))
	fmt.Println("json has the term:", strings.Contains(w.Body.String(), `"term": 1042`))
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "dbinformer_shard_owned" || mf.GetName() == "dbinformer_shard_members" {
			fmt.Println(mf.GetName(), mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output:
	// members: [{replica-a 0} {replica-b 0}]
	// owned: [{3 1042}]
	// in progress: shard 5 in: true
	// done: shard 3 in: true took 40ms
	// done: shard 7 in: false took 1s work in flight outlived the drain timeout
	// json has the term: true
	// dbinformer_shard_members 2
	// dbinformer_shard_owned 1
}
