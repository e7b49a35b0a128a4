// Package core is dbinformer's informer machinery: client-go's tools/cache
// (Reflector, DeltaFIFO, Indexer, SharedIndexInformer, factory, listers),
// generically typed and free of Kubernetes, fed by any source that
// implements ListerWatcher (contract.go). It imports no database client.
//
// # Pipeline
//
//	ListerWatcher[T] ──List/Watch──▶ Reflector[T] ──▶ Queue[T] ──Pop──▶ SharedIndexInformer[T]
//	                                                  (FIFO or DeltaFIFO)   ├─▶ Indexer[T] (cache, indexes)
//	                                                                        └─▶ one goroutine + buffer per handler
//
// The Reflector lists (Replace), then watches from the list's version.
// Bookmarks advance the version; an error matching ErrExpired relists from
// scratch; any other failure backs off (exponential, jitter, reset after a
// healthy period; Backoff) and resumes the watch from the last version,
// without relisting. Each watch ends after a random time in
// [MinWatchTimeout, 2×MinWatchTimeout) and reopens from the last version.
// A batch whose versions go backwards is not applied (*OrderError) and the
// reflector relists: the late change is below the applied version, so
// resuming the watch would skip it. An event with Err set (and a Transform error) is reported
// as a *DecodeError naming source, key and version; its key keeps its last
// good state and the version still advances.
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
//	go inf.Run(ctx)                          // returns when ctx is done; may be run again later
//	if err := inf.WaitForCacheSync(ctx); err != nil { ... } // err says why: the last list error
//	u, ok := inf.Lister().Get("42")
//	rv := writeToDatabase()                  // the version the write produced
//	_ = inf.WaitFor(ctx, rv)                 // read-your-writes: the cache now holds it
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
// receiving. Registration.HasSynced (and WaitForCacheSync) is true once the
// informer synced and the handler received its initial adds; a handler added late first receives
// the whole cache as adds with isInInitialList true. RemoveEventHandler
// stops delivery; Registration.Done tells when no call is in progress.
//
// Resync follows client-go: a handler period below 1s becomes 1s; before
// Run a smaller handler period lowers the informer's check period, after
// Run it is raised to the check period. One deliberate change: an informer
// created without a resync period adopts the first handler period requested
// before Run, instead of silently disabling it.
//
// WaitFor(ctx, rv) returns once every change up to rv (and every bookmark
// up to it) is in the Indexer; a source transaction is applied under one
// lock, so readers see it whole. If the ListerWatcher implements
// ProgressReporter, WaitFor asks the open watch for a bookmark (rate-limited by
// ProgressRequestInterval) so that a version touching no watched key is
// reached too.
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
// vanished, Resync skipping keys with pending deltas, HasSynced after the
// first Replace is processed, Pop with requeue (ErrRequeue), Close. Both can
// be used without an informer.
//
// # Sharing
//
// Factory shares one informer per (source name, type); get one with
// InformerFor[T](f, source, lw, opts) (Go methods cannot be generic).
// Start is idempotent, WaitForCacheSync joins the reasons of every informer
// that did not sync, Shutdown stops them and waits for every goroutine.
//
// # Metrics and errors
//
// Nothing is global: InformerOptions.Metrics (a MetricsProvider) receives
// list/relist counts, list progress (with the source's estimate), watch
// restarts, the applied version, pending notifications per handler, handler
// panics and decode errors; NoopMetrics is the default. ErrorHandler
// receives every error (nil logs with Logger or slog.Default()).
//
// Time comes from InformerOptions.Clock (core/clock), so tests step resync,
// backoff and watch timeouts with clock.Fake and never sleep.
package core
