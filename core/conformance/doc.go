// Package conformance is a test suite that any core.ListerWatcher can run to
// show that it keeps the contract the informer relies on: List is one
// consistent snapshot even while others write, Watch(from) delivers exactly
// the changes after from in version order with the right event types,
// deletes carry the key (and the last object when the source has it), an
// expired position yields core.ErrExpired, bookmarks reach versions that
// touched no watched key, and cancellation ends a watch cleanly.
//
// An adapter's test provides a Source: a fresh, empty watched set on a real
// server plus the few writes the suite needs, and calls Run:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Capabilities{DeletesCarryObject: true},
//			func(t *testing.T) conformance.Source[*Item] { return newTestSource(t) })
//	}
//
// Two optional interfaces on the Source widen the checks: KeyMapper, for a
// ListerWatcher that reports keys in another form than the one written
// (Kubernetes reports "namespace/name"), and Transactor, for a source that
// can write several keys in one transaction, whose events must then share
// one RV and arrive in one batch.
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
//   - Resume: a watch reopened from the last RV of a batch continues.
//   - Transaction: a transaction's events share an RV and one batch.
//   - Expired: Watch from before Source.Expire yields core.ErrExpired.
//   - Bookmark: PutUnwatched's RV is reached by a Bookmark.
//   - CancelWatchContext, CancelNextContext, Stop: a watch ends promptly
//     and, with StrictGoroutines, leaves no goroutine.
//
// Every watch is also checked batch by batch: no empty batch, RVs strictly
// after from and after every earlier batch or Bookmark, non-decreasing
// within a batch, no Err on any event.
//
// The suite writes only keys made of lowercase ASCII letters, digits and
// '-', which every source accepts as a key suffix, primary key, KV key or
// object name. It never asserts how long anything takes: every wait has a
// generous deadline (Capabilities.Timeout) that only a broken or wedged
// source reaches. It never skips: a case the source cannot support (no
// Expire, neither PutUnwatched nor progress requests) is logged and passes,
// so that CI never shows a skip.
//
// The suite checks itself: its own tests run it against deliberately broken
// wrappers of the in-memory source (dropping, repeating or reordering
// events, ignoring expiry) and require it to fail.
package conformance
