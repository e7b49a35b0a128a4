// Package statuspage is the operators' view of a program's informers and
// work queues: a live HTML status page, the same data as JSON, initial-sync
// progress, and health checks for Kubernetes probes. It is mounted like
// net/http/pprof:
//
//	page := statuspage.New(statuspage.Options{Title: "orders-service"})
//	inf := core.NewSharedIndexInformer(kv, core.InformerOptions[User]{
//		Name:    "users",
//		Metrics: core.MultiMetrics(page, prom), // prom: a metrics/prometheus Provider, or leave it out
//	})
//	page.Add(inf)                         // name, source kind, head, checkpoints: from the informer
//	page.AddRelay(r)                      // a relay.Relay: leader or follower, term, stream, lag
//	mux.Handle("/debug/informers/", page) // HTML, ?format=json, readyz, livez
//
// # How it knows
//
// The page is a core.MetricsProvider and a workqueue.MetricsProvider: it
// records what each informer and queue reports (lists and relists, list
// progress, watch restarts and their reasons, applied versions, pending
// notifications per handler, handler panics, decode errors; queue depth,
// adds, retries, latencies, longest-running item, unfinished work). It is
// injected, never global: each informer or queue that should appear gets
// the page as its provider, and core.MultiMetrics / workqueue.MultiMetrics
// keep Prometheus (or any other provider) fed as well. Add joins an
// informer's own answers, all under its name: its SyncStatus (synced,
// applied and received versions, list failures, a permanent stop, its
// source's kind, its checkpoints, the last decode error) and its source's
// head read through it (core.SharedIndexInformer.Head, one read shared
// with Prometheus) for the lag; InformerFor does both for a core.Factory.
//
// # What it shows
//
// Per informer: the source's kind and name; synced or not and why not
// (listing with its progress, the last list error, a permanent failure);
// the applied version, the source's head and the lag in versions and
// seconds (unknown, and since when, while the head cannot be read; never
// 0); lists, relists and watch restarts with the last reason and time;
// decode errors (count, and the last one's key, version and reason);
// pending notifications per handler (named by HandlerOptions.Name or
// ResourceEventHandlerFuncs.Name) with the slowest named; what the
// informer's checkpoints are doing (off, none saved yet, the last one
// saved and the last failure). Per
// work queue: depth, adds, retries, wait and work times, the longest
// running item and the unfinished work. Per relay (package relay, added
// with AddRelay): leader or follower, its term (epoch and identity; the
// term that wrote the stream's last message), the messages it published,
// the source version JetStream stored (what the source was acknowledged),
// the stream's last sequence and version, the source's head, the lag
// (head − stream version, in the source's units; unknown while either
// cannot be read), relists, repairs (the stream mended from the source
// without a relist) and failed terms with the last reason. A relay
// is read through its RelayStatus when the page or its JSON is served;
// the probes do not read it.
//
// The lag in seconds is how long the oldest head version the cache has
// not applied yet has been known: heads are read when the page, the JSON
// or a probe is served (at most every Options.HeadInterval), and by
// Page.Run in the background for a lag in seconds that does not depend on
// anyone looking. The HTML page reloads itself every Options.Refresh
// (?refresh=N overrides it, ?refresh=0 stops it).
//
// While an informer lists, the page shows a progress bar (an HTML
// progress element) with the objects received, the source's estimate
// where it has one, the rate and the time left, all from the one core
// callback InformerMetrics.ListProgress. PrintProgress prints the same on
// a terminal.
//
// # Health
//
// Ready (readyz) is true when every informer on the page has synced, and
// says why not otherwise. Live (livez) fails only when an informer failed
// permanently (stopped: its cache is frozen, though HasSynced stays true as
// in client-go) or stalled (received versions it does not apply for
// Options.StallTimeout); relists, expired versions, watch timeouts and a
// source that is down are retried by the informer and do not make a
// program unlive, so the probe does not flap.
//
// # Secrets
//
// The page never reads a cache and never shows an object. Every name and
// message it shows goes through Redact, which removes URL credentials,
// password=, token=, secret= and similar settings, bearer tokens, JSON web
// tokens and NATS seeds. The page has no controls: it only reads. Serve it
// on an internal port like pprof all the same.
package statuspage
