// Package controller runs reconcilers over informer caches: the
// informer → key → work queue → workers → reconcile loop that every
// production user of informers writes, with retries, leader election,
// health probes and graceful shutdown, in the spirit of Kubernetes'
// controller-runtime but for any source this library syncs (etcd
// prefixes, Postgres tables, NATS KV buckets, kube-apiserver resources).
//
// A Reconciler makes the world match the state of one key. New makes a
// Controller of it: N workers over a core/workqueue Queue, which never
// hands one key to two workers, deduplicates a key enqueued again before
// a worker took it, and delays retries through its rate limiter. Watch
// connects an informer: each change passes the predicates and is mapped
// to keys (ObjectKey, Owner, IndexKeys or any Mapper). A Manager starts
// the informers (its Factory; Informer wires metrics and the status page),
// campaigns for leadership while keeping caches and queues live, runs the
// controllers while it leads and serves /healthz, /readyz, /metrics and
// the status page.
//
//	mgr, _ := controller.NewManager(controller.ManagerOptions{Elector: el, Listener: ln})
//	apps := controller.Informer(mgr, "apps", lw, core.InformerOptions[App]{})
//	c, _ := controller.NewManaged(mgr, "apps", reconciler, controller.Options[string]{Workers: 4})
//	controller.Watch(c, apps, controller.ObjectKey[App](), controller.WatchOptions[App]{})
//	mgr.Run(ctx)
//
// # What a reconcile gets
//
// A nil error forgets the key's failures (Result.RequeueAfter asks for it
// again later); an error retries it with the rate limiter's delay (per key
// exponential from 5 ms under a 10 qps bucket by default), up to
// Options.MaxRetries if set; Terminal(err) reports and does not retry; a
// panic is recovered, reported as a *PanicError with its stack, counted
// and retried. Options.ErrorHandler sees each failure (a *RetryError
// says which retry and its delay); metrics count reconciles by result
// and time them (MetricsProvider), beside the queue's depth, latency and
// retries (Options.QueueMetrics).
//
// Read-your-writes: after writing to the source, the reconcile records
// the version the source returned with Wrote; Get (or CatchUp) then
// waits until the informer has applied it — through the informer's
// WaitFor, which asks the source for a bookmark when the write touched no
// watched key — and so does the next reconcile of the same key, even if
// it starts before the watch event of the write arrives.
//
// # Shutdown and leadership
//
// When Manager.Run's context ends: the workers stop taking keys, the
// reconciles in flight finish (their context stays live for
// Options.DrainTimeout, then is cancelled with a cause naming the
// controller), the queues shut down and the informers stop last. A lost
// leadership cancels reconciles in flight at once (cause leader.ErrLost),
// and TermOf gives a reconcile its term's fencing epoch to pass to what
// it writes.
//
// A standby replica is warm: its informers are synced and follow the
// source, its watches keep filling its controllers' queues (deduplicated,
// so a queue holds each key once), and /readyz says ready. When it wins,
// its workers start on a full queue against a current cache: no list,
// no sync wait (see BENCHMARKS.md for the failover against a cold start).
//
// # Against controller-runtime
//
//	controller-runtime                   here
//	reconcile.Reconciler, Request        Reconciler[K], any comparable key (string: the cache key)
//	reconcile.Result{RequeueAfter}       Result{RequeueAfter}
//	reconcile.TerminalError              Terminal, ErrTerminal
//	RecoverPanic (off by default)        always on, counted as result "panic", retried
//	MaxConcurrentReconciles              Options.Workers
//	workqueue (rate limited, priority)   core/workqueue: same semantics, priorities, faster
//	builder For / Owns / Watches         Watch with ObjectKey / Owner / IndexKeys / a Mapper
//	handler.EnqueueRequestsFromMapFunc   Mapper[T, K]
//	predicate.GenerationChangedPredicate FieldChanged(func(T) F), Predicate[T]
//	SyncPeriod                           WatchOptions.Resync, per watch
//	Manager, healthz/readyz, metrics     Manager, Handler: /healthz /readyz /metrics /debug/informers/
//	leader election (Lease)              leader.Elector: etcd, Postgres advisory lock or Lease
//	warm replicas (design, PR open)      built in: standbys keep caches live and queues full
//	GracefulShutdownTimeout              Options.DrainTimeout, ManagerOptions.DrainTimeout
//	controller_runtime_reconcile_total   dbinformer_controller_reconciles_total{controller,result}
//
// Beyond it:
//   - Sources: any ListerWatcher — database rows and keys, not only
//     Kubernetes objects; one controller can watch informers of several
//     sources (a Postgres table and an etcd prefix).
//   - Read-your-writes (Wrote, Get, CatchUp) over WaitFor: controller-runtime
//     users re-read from the API server or tolerate conflicts, because a
//     cache cannot say whether it holds their write; here every source's
//     version is totally ordered, so it can.
//   - Warm restart: informers with core.CheckpointOptions start from a
//     checkpoint instead of a list, so even a cold replica is quick.
//   - Sharded mode (ManagerOptions.Sharder, package shard): each replica
//     reconciles only the keys of the shards it owns, under a term
//     (ShardTicketOf) that fences a deposed owner's writes; handoff drains
//     in-flight reconciles before the shard moves.
//   - A deposed leader's in-flight reconciles are cancelled at once with a
//     named cause, and the term's epoch is at hand for fencing writes.
//   - Audits (core.InformerOptions.Audit) compare each cache with its
//     source at one version and heal the keys that differ; /readyz fails
//     while an informer's last audit found differences it did not heal
//     (HealReportOnly), naming the informer and the keys.
//
// Left out, and why:
//   - Webhooks, CRD conversion, the scheme and client machinery: those are
//     Kubernetes API server concerns, not a database controller's.
//   - A write client: each source's own client writes (clientv3, pgx,
//     client-go); the library supplies the version to wait for.
//   - Typed object Requests: the key is the cache key, so a reconcile
//     reads the state from the cache, never from the event.
package controller
