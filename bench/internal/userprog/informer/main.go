// Command informer is the program a user writes from the README: a
// pginformer Source, a Table, an informer with one index, then
// WaitForCacheSync. BenchmarkUserProgram runs it as a process of its own:
//
//	informer <conn string> <table>
//
// It prints userprog.Report's line once synced, with the steps of its
// start-up (seconds since exec): source (NewSource returned), table
// (NewTable returned), list (the informer's List began), first-row (the
// List's first row read) and synced.
// USERPROG_LOG=debug logs the Source's steps to stderr;
// USERPROG_CPUPROFILE=file writes a CPU profile of the run there.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/bench/internal/userprog"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// firstRow notes when its List hands over the first row; the rest of the
// ListerWatcher, capabilities included, is the embedded Table's.
type firstRow struct {
	driver.ListerWatcher[userprog.Account]
	at atomic.Int64
}

func (f *firstRow) List(ctx context.Context, sink driver.ListSink[userprog.Account]) (core.ResourceVersion, error) {
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[userprog.Account]) error {
		if f.at.Load() == 0 {
			f.at.Store(time.Now().UnixNano())
		}
		return emit(ev)
	}
	return f.ListerWatcher.List(ctx, sink)
}

func main() {
	clk := userprog.NewClock()
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: informer <conn string> <table>")
		os.Exit(2)
	}
	if path := os.Getenv("USERPROG_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(clk, os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "informer:", err)
		os.Exit(1)
	}
}

func run(clk userprog.Clock, conn, table string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := pginformer.Options{}
	if os.Getenv("USERPROG_LOG") == "debug" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	src, err := pginformer.NewSource(ctx, conn, opts)
	if err != nil {
		return err
	}
	defer src.Close()
	sourced := time.Now()
	tbl, err := pginformer.NewTable[userprog.Account](ctx, src, table, pginformer.TableOptions[userprog.Account]{})
	if err != nil {
		return err
	}
	tabled := time.Now()
	lw := &firstRow{ListerWatcher: tbl}
	inf := core.NewSharedIndexInformer[userprog.Account](lw, core.InformerOptions[userprog.Account]{
		Indexers: core.Indexers[userprog.Account]{
			"org": func(a userprog.Account) ([]string, error) { return []string{a.Org}, nil },
		},
	})
	done := make(chan struct{})
	go func() { inf.Run(ctx); close(done) }()
	listed := make(chan time.Time, 1) // when the List began (SyncStatus.ListStarted)
	go func() {
		for t := time.NewTicker(time.Millisecond); ; <-t.C {
			if st := inf.SyncStatus(); !st.ListStarted.IsZero() || st.Synced {
				t.Stop()
				listed <- st.ListStarted
				return
			}
		}
	}()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		return err
	}
	synced := time.Now()
	first := time.Unix(0, lw.at.Load())
	list := <-listed
	if list.IsZero() { // listed and synced between two looks
		list = first
	}
	userprog.Report(os.Stdout, inf.Lister().Len(),
		"source-s", clk.Since(sourced), "table-s", clk.Since(tabled), "list-s", clk.Since(list),
		"first-row-s", clk.Since(first), "synced-s", clk.Since(synced))
	cancel()
	<-done
	return nil
}
