// Package core is dbinformer's informer machinery: client-go's tools/cache
// (Reflector, DeltaFIFO, Indexer, SharedIndexInformer, factory, listers),
// generically typed and free of Kubernetes, fed by any source that
// implements driver.ListerWatcher (package core/driver). It imports no
// database client.
//
// Most programs need only NewSharedIndexInformer (or a Factory),
// AddEventHandler, Run, WaitForCacheSyncTimeout, Lister and WaitFor.
// Adapter authors implement the contract in core/driver, with a codec
// from core/codec; checkpoints are kept by a core/checkpoint Store.
// Reflector, Queue, FIFO, DeltaFIFO and Delta are for assembling a pipeline
// by hand.
//
// # Pipeline
//
//	ListerWatcher[T] ──List/Watch──▶ Reflector[T] ──Delta──▶ Queue[T] ──Pop──▶ SharedIndexInformer[T]
//	                                                         (FIFO or DeltaFIFO)   ├─▶ Indexer[T] (cache, indexes)
//	                                                                               └─▶ one goroutine + buffer per handler
//
// The Reflector lists, then watches from the list's version. The list
// streams: each object goes on to the queue as the source emits it, and the
// queue holds at most a few thousand deltas while the informer applies them,
// so an initial sync holds little beside the cache itself (a relist also
// keeps the set of keys it saw, to infer deletes). The first list into an
// empty cache is appended to pages without a lookup (its index entries made
// as it goes) and filed (into the checkpoint's base, below) before the
// informer reports the sync; a reader meanwhile files what is there first,
// so it sees the same as ever. Watch pushes batches
// through driver.WatchOptions.Emit; bookmarks advance the version; an error
// matching driver.ErrExpired relists from scratch; an error matching driver.ErrPermanent
// stops the informer (Run and WaitForCacheSync return it); any other
// failure backs off (Backoff: exponential, jitter within the cap, back to
// the first step as soon as a watch moves the version again) and resumes
// the watch from the last version, without relisting; a driver.ListerWatcher that
// implements driver.HealWaiter cuts that wait short once its source is back.
// Optional interfaces such as driver.HealWaiter are found with driver.Capability, through
// wrappers that embed the ListerWatcher or have Unwrap (filter.Wrap,
// informertest.Spy): a wrapper keeps the capabilities of what it wraps.
// Each watch is cancelled after a random time in [MinWatchTimeout,
// 2×MinWatchTimeout) and reopened from the last version. A watch that
// should show progress every ProgressInterval (driver.ProgressIntervaler, or
// InformerOptions.ProgressInterval) and shows none, not even the bookmark
// it is asked for, for driver.StuckIntervals of them is stuck (a frozen server, a
// half-open connection): it is reopened from the last version and reported
// (driver.ErrWatchStuck). A batch whose
// versions go backwards is not applied (*OrderError) and the reflector
// relists: the late change is below the applied version, so resuming the
// watch would skip it.
//
// Every Event becomes a Delta once, in the reflector: an event with Err
// set, without a key, or that Transform rejects (or panics on) is reported
// as a *driver.DecodeError naming source, key and version, and never leaves the
// key's previous object looking current, on any source: by default
// (InformerOptions.Undecodable, RemoveUndecodable) the key leaves the cache
// with a delete (finalStateUnknown) and the version still advances; with
// StopOnUndecodable the informer stops with a permanent error.
//
// A run that ends on a permanent failure leaves the cache as it was,
// frozen. HasSynced keeps client-go's meaning (the first list was applied;
// it never turns false), so Live is what tells a cache that still follows
// its source from a frozen one, and SyncStatus says "stopped: <error>".
//
// # Using an informer
//
//	inf := core.NewSharedIndexInformer[*User](lw, core.InformerOptions[*User]{
//		Name:     `postgres table "public"."users"`,
//		Indexers: core.Indexers[*User]{"org": func(u *User) ([]string, error) { return []string{u.Org}, nil }},
//	})
//	reg, _ := inf.AddEventHandler(core.ResourceEventHandlerFuncs[*User]{
//		AddFunc:    func(key string, u *User, isInInitialList bool) { ... },
//		UpdateFunc: func(key string, old, new *User) { ... },
//		DeleteFunc: func(key string, last *User, finalStateUnknown bool) { ... },
//	})
//	go inf.Run(ctx) // returns when ctx is done or the source fails permanently
//	if err := core.WaitForCacheSyncTimeout(ctx, time.Minute, inf); err != nil {
//		if ctx.Err() != nil {
//			return nil // interrupted while starting
//		}
//		return err // says why: the latest list error, a list still running, a permanent failure
//	}
//	u, ok := inf.Lister().Get("42")
//	rv := writeToDatabase() // the version the write produced
//	_ = inf.WaitFor(ctx, rv) // read-your-writes: the cache now holds it
//
// Handlers receive typed values only. A delete carries the last state: the
// source's when its event had one, the cache's otherwise; finalStateUnknown
// is client-go's DeletedFinalStateUnknown (the delete was inferred by a
// relist). A delete for a key the cache never held is not delivered (no
// handler saw that key; client-go drops it too). OnUpdate(key, obj, obj) is
// a resync, or a relisted key (with InformerOptions.Equal, an unchanged
// relisted key only reaches handlers due for a resync).
//
// Handlers run one goroutine each, so a slow handler delays only itself;
// Registration.Pending and InformerMetrics.PendingNotifications show it.
// HandlerOptions.MaxPending bounds its buffer: when full the informer
// blocks (the cache stops advancing), it never drops. A panicking handler
// is recovered and reported (*HandlerPanicError); it and the others keep
// receiving, and so are panics in index functions (*IndexError) and Equal.
// Registration.HasSynced (and WaitForCacheSync) is true once the informer
// synced and the handler received its initial adds; a handler added late
// first receives the whole cache as adds with isInInitialList true.
// RemoveEventHandler stops delivery; Registration.Done tells when no call is
// in progress.
//
// Read through the Lister: Get, List, Len, ByIndex, Index, IndexKeys,
// ListIndexFuncValues. A lookup in an unknown index fails with an error
// matching ErrUnknownIndex.
//
// Resync follows client-go: a handler period below 1s becomes 1s; before
// Run a smaller handler period lowers the informer's check period, after
// Run it is raised to the check period. One deliberate change: an informer
// created without a resync period adopts the first handler period requested
// before Run, instead of silently disabling it. For every duration option,
// zero means the default and a negative value means off.
//
// WaitFor(ctx, rv) returns once every change up to rv (and every bookmark
// up to it) is in the Indexer; a source transaction is applied under one
// lock, so readers see it whole. If the ListerWatcher implements
// driver.ProgressReporter, WaitFor asks the open watch for a bookmark
// (rate-limited by ProgressRequestInterval) so that a version touching no
// watched key is reached too.
//
// Run may be called again after it returned: cache, handlers and their
// undelivered notifications are kept, and the new list reconciles the
// cache (vanished keys are deleted with finalStateUnknown). HasSynced stays
// true once true.
//
// # Queues
//
// FIFO (the default) hands changes over in arrival order across keys, like
// client-go's RealFIFO. DeltaFIFO (InformerOptions.DeltaFIFO) is client-go's
// per-key grouping: Added/Updated/Deleted/Replaced/Sync deltas, double
// deletes collapsed, FinalStateUnknown deletes on Replace for keys that
// vanished, Resync (key-only Sync deltas) skipping keys with pending deltas,
// HasSynced after the first list is processed, Pop with requeue
// (ErrRequeue), Close. Queue.Changed signals a move of the applied version.
// Both can be used without an informer.
//
// # Sharing
//
// Factory shares one informer per (source name, type); get one with
// InformerFor[T](f, source, lw, opts) (Go methods cannot be generic). The
// zero Factory is ready to use. Start is idempotent, WaitForCacheSync joins
// the reasons of every informer that did not sync, Shutdown stops them and
// waits for every goroutine.
//
// # Warm restarts
//
// InformerOptions.Checkpoint saves the cache and the version it is
// consistent at through a checkpoint.Store (checkpoint.NewDirStore: write,
// fsync, rename; a checksum and a format version; owner-only files),
// periodically and when a run ends. The next run, in this process or the
// next, loads the last checkpoint, serves it at once (HasSynced false,
// ServingCheckpoint and SyncStatus.Checkpoint say so), hands handlers its
// objects as initial adds, and watches from its version. Objects are
// encoded and decoded in chunks on every CPU, and a checkpoint loaded into
// an empty cache becomes the Indexer's frozen base as it is (the decoded
// chunks, and a table of their keys' positions built segment by segment),
// not a map filled key by key nor a delta queued per object. codec.Binary, a
// compact codec compiled from T's shape, is several times faster than codec.JSON
// for plain structs (the Postgres adapter uses it when its row type
// allows); with it, an informer with no index function decodes the loaded
// objects a chunk at a time when first read, and each handler gets its
// initial adds a chunk at a time, decoded in its own goroutine from the
// checkpoint's bytes (the values loaded, whatever the cache did since), so
// a million rows are served about a tenth of the time a list takes after
// the start (BENCHMARKS.md). A source that parks state between watches starts
// rebuilding it as soon as the checkpoint's header gives its version
// (driver.Restorer). When the version has expired it relists and handlers get
// only the real differences. A source that acknowledges positions to its server
// acknowledges only what a durable checkpoint covers (driver.DurableAcknowledger).
// A corrupt or foreign checkpoint is reported (*CheckpointError) and
// ignored.
//
// # Consistency audit
//
// InformerOptions.Audit compares the cache with the source every period,
// as of one version C read through the adapter's driver.AuditLister, leaving out
// the keys a change after C reached meanwhile (in flight), and heals what
// differs as ordinary changes (HealKeys) or only reports it. Each run's
// AuditResult (equal, or the missing, extra and differing keys, never
// values) is in SyncStatus.Audit and LastAudit, goes to an InformerMetrics
// that implements AuditMetrics, and is logged at Warn when it differs;
// AuditNow runs one at once. A run never panics and never holds the
// informer beyond its pace; one that cannot compare is AuditFailed.
//
// # Metrics and errors
//
// Nothing is global: InformerOptions.Metrics (a MetricsProvider) receives
// list/relist counts, list progress (with the source's estimate), watch
// restarts, the applied version, pending notifications per handler, handler
// panics and decode errors; NoopMetrics is the default. ErrorHandler
// receives every error as it happens, each failed attempt to list or watch
// included (nil logs with Logger or slog.Default(): an expired version at
// Info, a stuck watch at Warn, the rest at Error). SyncStatus keeps the
// latest list and watch failures (how many in a row, when, the source's
// error) and whether a list is running and since when; the errors of
// WaitForCacheSync, WaitForCacheSyncTimeout and WaitFor say the same, so
// a wait that gives up names its cause ("list: etcdserver: no leader (3
// attempts, last 2s ago)"), not only "context deadline exceeded".
//
// Time comes from InformerOptions.Clock (core/clock), so tests step resync,
// backoff and watch timeouts with clock.Fake and never sleep.
package core
