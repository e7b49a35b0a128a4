// Package conformance is a test suite that any driver.ListerWatcher can run to
// show that it keeps the contract the informer relies on: List is one
// consistent snapshot even while others write, Watch(from) pushes exactly
// the changes after from in version order with the right event types,
// deletes carry the key (and the last object when the source has it), an
// expired position yields driver.ErrExpired, bookmarks reach versions that
// touched no watched key, and a watch ends the one way the contract names.
//
// An adapter's test provides a Harness (harness.go): a fresh, empty watched
// set on a real server plus the few writes the suite needs, and calls Run:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Capabilities{DeletesCarryObject: true},
//			func(t *testing.T) conformance.Harness[*Item] { return newTestHarness(t) })
//	}
//
// An adapter whose ListerWatcher implements driver.AuditLister also calls
// RunAudit with the same Harness: the consistency audit finds and heals
// each lie an informertest.Lossy tells the informer, and reports nothing
// while writers race it (RunFiltered's Filtered harness audits a partial
// sync).
//
// The same Harness serves the reliability suite (integration/reliability,
// which also needs Truth and Faults) and the benchmarks (bench/), so an
// adapter writes its glue once, in the shape of gocloud's drivertest.
// Optional interfaces on the Harness widen the checks:
//
//   - Expirer: the position can be made unusable (compaction, slot drop,
//     purge): the Expired case.
//   - Unwatched: the source has writes outside the watched set: the
//     Bookmark case waits for a Bookmark past one.
//   - KeyMapper: the ListerWatcher reports keys in another form than the
//     one written (Kubernetes reports "namespace/name").
//   - Transactor: several keys can be written in one transaction, whose
//     events must then share one RV and arrive in one batch.
//   - Dropper: the watched set can be removed for good (DROP TABLE, a
//     deleted bucket): an open watch must end with driver.ErrPermanent.
//   - Truth and Faults: used by integration/reliability, not by this suite.
//
// The cases, each a subtest of Run:
//
//   - ListEmpty, ListAfterWrites, ListMany: List returns exactly the live
//     keys at their latest versions, and its RV is where the watch of what
//     follows starts.
//   - ListEmitError: List stops at, and returns, the first Emit error.
//   - ListConsistentUnderWrites: Lists taken while writers run are
//     snapshots at their RV; list plus watch folds to the final state.
//   - WatchFromList, WatchFromMiddle, WatchLive, Deletes: Watch(from)
//     delivers exactly the writes after from, with the right types, keys,
//     versions and RVs, and the delete's last object when promised.
//   - Resume: a watch cancelled after a batch and reopened from the last RV
//     of that batch continues.
//   - Transaction: a transaction's events share an RV and one batch.
//   - Expired: Watch from before Expirer.Expire returns an error matching
//     driver.ErrExpired, having emitted nothing (not even a Bookmark).
//   - Bookmark: a receive on WatchOptions.Progress (for a ListerWatcher
//     whose driver.ProgressReporter reports true) is answered by a Bookmark
//     at or after the head, and PutUnwatched's RV is reached by a Bookmark.
//   - Cancel: cancelling the context given to Watch makes Watch return an
//     error matching driver.ErrWatchStopped and the context's cause
//     (driver.Stopped), whether the watch was waiting for a change or blocked
//     inside Emit, and also when the context was done before Watch was
//     called; afterwards Emit is never called again and, with
//     StrictGoroutines, no goroutine the watch started is left.
//   - EmitError: an error from Emit ends Watch, which returns an error
//     matching it and never calls Emit again.
//   - Dropped: with a Dropper, an open watch ends with an error matching
//     driver.ErrPermanent once the watched set is gone.
//
// Every watch is also checked batch by batch: no empty batch, RVs strictly
// after from and after every earlier batch or Bookmark, non-decreasing
// within a batch, no Err on any event, Emit never called concurrently with
// itself nor after Watch returned, and Watch never returning nil. The suite
// copies each batch inside Emit, since the adapter may reuse the slice.
//
// The suite writes only keys made of lowercase ASCII letters, digits and
// '-', which every source accepts as a key suffix, primary key, KV key or
// object name. It never asserts how long anything takes: every wait has a
// generous deadline (Capabilities.Timeout) that only a broken or wedged
// source reaches. It never skips: a case the harness cannot support (no
// Expirer, neither Unwatched nor progress reports) is logged and passes, so
// that CI never shows a skip.
//
// The suite checks itself: its own tests run it against deliberately broken
// wrappers of the in-memory source (dropping, repeating or reordering
// events, ignoring expiry, returning nil or a bare context error when
// cancelled, swallowing Emit's error, emitting after returning, reporting a
// drop as transient) and require the case meant to catch each bug to fail.
package conformance
