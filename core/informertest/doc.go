// Package informertest is a test kit for code built on dbinformer, in the
// spirit of net/http/httptest and testing/fstest: the pieces every informer
// test needs, written once.
//
//   - Recorder is a handler that logs each notification in one format
//     ("add k v=3 initial", "update k 3->4", "delete k v=4 unknown"),
//     keeps the handler's view of each key, fails the test when a key's
//     version goes backwards (or an update's old object or a delete does
//     not match what the handler holds), and waits for expected lines or
//     an expected view.
//   - Lossy wraps any driver.ListerWatcher and makes its Watch drop, alter
//     or replay a stale change, seeded or armed, while List and
//     AuditList tell the truth: what proves the consistency audit
//     (core.InformerOptions.Audit) finds each divergence.
//   - Spy wraps any driver.ListerWatcher, core/memory or a real adapter: it
//     records each List and Watch (Calls, Lists, Watches, Open), holds them
//     at a Gate until released, fails the next one (FailNextList,
//     FailNextWatch) and breaks the open watches as a dropped connection
//     would (Break), forwarding driver.ProgressReporter, driver.HeadReader and
//     driver.HealWaiter.
//     A Gate makes an interleaving deterministic where a sleep would only
//     make it likely.
//   - Run starts an informer for the length of a test, collects what it
//     reports in Errors, and fails the test with WaitForCacheSync's reason
//     if it does not sync; WaitFor waits for a version.
//   - Eventually waits for a condition nothing signals.
//
// Every wait here waits for a condition, never for a span of time: the only
// clock is Timeout, a deadline for a wedged test after which the test fails
// naming what it waited for. Waits that take a TB (a *testing.T) fail the test and
// must be called from the test's goroutine; the Spy's waits take a context
// and return an error instead, so they can also run in other goroutines.
package informertest
