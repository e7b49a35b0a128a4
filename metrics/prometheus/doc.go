// Package prommetrics reports dbinformer's informer and workqueue metrics to
// Prometheus (github.com/prometheus/client_golang).
//
// The package is named prommetrics, not prometheus, so that it can be
// imported next to client_golang's own prometheus package without an alias:
//
//	import (
//		"github.com/prometheus/client_golang/prometheus"
//		prommetrics "github.com/dbinformer/dbinformer/metrics/prometheus"
//	)
//
// One Provider registers its collectors on the prometheus.Registerer it is
// given, never on the global default registry unless that is what the caller
// passes, and serves every informer and queue that is given it:
//
//	reg := prometheus.NewRegistry()
//	pm, err := prommetrics.New(reg, prommetrics.Options{})
//	inf := core.NewSharedIndexInformer(lw, core.InformerOptions[T]{Name: "orders", Metrics: pm})
//	pm.TrackLag(inf) // reads the source's head through the informer
//	q := workqueue.New(workqueue.Options[string]{Name: "orders", MetricsProvider: pm})
//
// # Informer metrics (label informer = InformerOptions.Name)
//
//	dbinformer_informer_lists_total{kind="list|relist",result="success|error"}
//	dbinformer_informer_listed_objects            objects in the last successful list
//	dbinformer_informer_list_received_objects     objects received by the list in progress (or the last)
//	dbinformer_informer_list_estimated_objects    the source's estimate for that list, 0 if unknown
//	dbinformer_informer_list_objects_per_second   that list's rate since it started
//	dbinformer_informer_list_remaining_seconds    time left at that rate to reach the estimate, 0 when done or unknown
//	dbinformer_informer_watch_restarts_total{reason="timeout|expired|stuck|error"}
//	dbinformer_informer_applied_resource_version  the version up to which the cache is applied
//	dbinformer_informer_pending_notifications{handler}
//	dbinformer_informer_handler_panics_total{handler}
//	dbinformer_informer_decode_errors_total
//	dbinformer_informer_schema_changes_total{action="relist|fail"}  source schema changes (driver.SchemaChange)
//	dbinformer_informer_head_resource_version     the source's newest version (TrackLag only)
//	dbinformer_informer_lag                       head − applied, in the source's version units
//	dbinformer_informer_head_errors_total         failed head reads (TrackLag only)
//
// Lag is measured on scrape: for each informer given to TrackLag the
// collector calls the informer's Head (bounded by Options.HeadTimeout, so a
// stuck source cannot hang a scrape), which shares its read with a status
// page's, and subtracts the applied version. While the
// head cannot be read there is no head or lag sample: unknown, never 0. Its unit is the
// source's: etcd revisions, Postgres WAL bytes (versions are LSNs),
// JetStream sequences. Nothing polls between scrapes.
//
// # Relay metrics (label relay = relay.Options.Name, or the stream's)
//
// For each relay given to TrackRelay (package relay: pm.TrackRelay(r)),
// read through its RelayStatus at scrape time, like the informers' heads:
//
//	dbinformer_relay_leading                      1 while it leads, 0 while it follows
//	dbinformer_relay_epoch                        its current (or last) term's epoch
//	dbinformer_relay_terms_total                  terms it led
//	dbinformer_relay_published_messages_total     messages published and acknowledged by JetStream
//	dbinformer_relay_stored_resource_version      source version stored completely (acknowledged to the source)
//	dbinformer_relay_relists_total                relists of the source it published
//	dbinformer_relay_repairs_total                repairs of the stream from the source, with no relist
//	dbinformer_relay_term_restarts_total          terms that failed and started again from the stream
//	dbinformer_relay_stream_sequence              the stream's last sequence
//	dbinformer_relay_stream_resource_version      the last source version the stream holds completely
//	dbinformer_relay_head_resource_version        the source's newest version, read through the relay
//	dbinformer_relay_lag                          head − stream version, in the source's units
//	dbinformer_relay_stream_errors_total          failed reads of the stream during a scrape
//	dbinformer_relay_head_errors_total            failed reads of the source's head during a scrape
//
// A stream or head that cannot be read has no sample and no lag: unknown,
// never 0.
//
// # Workqueue metrics (label name = workqueue.Options.Name)
//
// client-go's set, with its names under the namespace: workqueue_depth,
// workqueue_adds_total, workqueue_queue_duration_seconds,
// workqueue_work_duration_seconds, workqueue_unfinished_work_seconds,
// workqueue_longest_running_processor_seconds, workqueue_retries_total.
// Dashboards built for client-go's queues work after changing the prefix.
package prommetrics
