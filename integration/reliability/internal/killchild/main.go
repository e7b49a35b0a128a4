package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
)

type versions struct {
	mu  sync.Mutex
	top map[string]int64
}

func (v *versions) see(what, key string, n int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if prev, ok := v.top[key]; ok && n < prev {
		fmt.Fprintf(os.Stderr, "BACKWARDS %s %s: version %d after %d\n", what, key, n, prev)
	}
	v.top[key] = max(v.top[key], n)
}

func (v *versions) OnAdd(key string, r pgtest.Row, _ bool)    { v.see("add", key, r.V) }
func (v *versions) OnUpdate(key string, _, r pgtest.Row)      { v.see("update", key, r.V) }
func (v *versions) OnDelete(key string, r pgtest.Row, _ bool) { v.see("delete", key, r.V) }

func main() {
	table := flag.String("table", "", "table")
	slot := flag.String("slot", "", "permanent slot")
	dir := flag.String("dir", "", "checkpoint directory")
	final := flag.Bool("final", false, "sync, print the cache and exit")
	flag.Parse()
	if err := run(*table, *slot, *dir, *final); err != nil {
		fmt.Fprintln(os.Stderr, "killchild:", err)
		os.Exit(1)
	}
}

func run(table, slot, dir string, final bool) error {
	ctx := context.Background()
	src, err := pginformer.NewSource(ctx, os.Getenv("KILLCHILD_CONN"), pginformer.Options{PermanentSlot: true, Slot: slot, StatusInterval: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	defer src.Close()
	tbl, err := pginformer.NewTable[pgtest.Row](ctx, src, table, pginformer.TableOptions[pgtest.Row]{})
	if err != nil {
		return err
	}
	store, err := core.NewDirCheckpointStore(dir)
	if err != nil {
		return err
	}
	spy := informertest.Wrap[pgtest.Row](tbl)
	inf := core.NewSharedIndexInformer[pgtest.Row](spy, core.InformerOptions[pgtest.Row]{
		Name:         "killchild",
		Backoff:      core.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond},
		ErrorHandler: func(err error) { fmt.Fprintln(os.Stderr, "informer:", err) },
		// Often, so that kills land during writes of checkpoints too.
		Checkpoint: &core.CheckpointOptions[pgtest.Row]{Store: store, Interval: 20 * time.Millisecond},
	})
	if _, err := inf.AddEventHandler(&versions{top: map[string]int64{}}); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(rctx) }()
	defer func() { cancel(); <-done }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		return err
	}
	if v := inf.SyncStatus().Checkpoint; v > 0 {
		fmt.Printf("loaded %d\n", v)
	}
	fmt.Printf("lists %d\n", spy.Lists())
	fmt.Println("synced")
	if !final {
		select {} // until killed
	}
	head, err := tbl.Head(ctx)
	if err != nil {
		return err
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := inf.WaitFor(wctx, head); err != nil {
		return err
	}
	state := map[string]int64{}
	inf.Indexer().Range(func(k string, r pgtest.Row) bool { state[k] = r.V; return true })
	b, err := json.Marshal(state)
	if err != nil {
		return err
	}
	fmt.Printf("state %s\n", b)
	return nil
}
