// Package driver is the contract between dbinformer's informer (package
// core) and the adapters that read a source: etcd, Postgres, NATS,
// Kubernetes, or one of your own. It is for adapter authors and for
// whoever wraps a source (a filter, metrics, logging); a program that only
// runs informers over the adapters this module ships needs little of it,
// which is why it is not part of core, as database/sql/driver is not part
// of database/sql.
//
// A source implements ListerWatcher: List pushes one consistent snapshot
// through a ListSink, Watch pushes every later change, in version order,
// through WatchOptions.Emit, as Events numbered by ResourceVersion. An
// adapter only reports what the source says and how a watch ended
// (ErrExpired, ErrPermanent, Stopped); retries, backoff, relists and
// resyncs are the informer's policy.
//
// Beyond List and Watch, a source may implement optional interfaces that
// let the informer do more: ProgressReporter and ProgressIntervaler (WaitFor
// of an untouched version, stuck-watch detection), HealWaiter (a retry as
// soon as the source is back), HeadReader (lag), CodecProvider, Restorer and
// DurableAcknowledger (checkpoints), AuditLister and AuditRechecker (the
// consistency audit). The informer finds them with Capability, through
// wrappers; code of your own that looks for one should too.
//
// The errors a source reports are matched by users too: an informer's
// error handler may tell a relist (ErrExpired) or a stop (ErrPermanent) by
// them. The conformance package (core/conformance) checks an adapter
// against this contract.
package driver
