// Package memory is an in-memory core.ListerWatcher: a versioned map with a
// retained change history, for tests and examples that need a source without
// a database.
//
// A Source numbers every write with the next ResourceVersion, like an etcd
// revision: Put, Delete and Apply (several keys in one transaction sharing
// one version) return the version of the write. Watch replays the retained
// history strictly after the requested version and then follows new writes;
// Compact drops history so that watching from before it fails with an error
// matching core.ErrExpired, which is how a test drives a Reflector into a
// relist. Advance moves the head without touching a key, as a write to an
// unwatched part of a database would, so that tests can exercise bookmarks
// (Source implements core.ProgressReporter) and WaitFor.
//
// Fault hooks let core tests reproduce what real sources do to an informer:
// FailNextList and FailNextWatch make the next call fail, OnList and OnWatch
// run a test's hook on every call (to fail some, or hold one while the test
// writes), BreakWatchers ends every open watch with an error as a dropped
// connection would, InjectDecodeError puts a change that could not be
// decoded into the history, and Options.HistoryLimit expires watches that
// fall behind a retention window.
// OpenWatchers, WaitForWatchers, ListCalls and WatchCalls let a test wait for
// the code under test to reach a state instead of sleeping.
//
// A Source starts no goroutine of its own; a watch holds only a
// context.AfterFunc registration that it releases when Watch returns.
package memory
