// Package memory is an in-memory driver.ListerWatcher: a versioned map with a
// retained change history, for tests and examples that need a source without
// a database.
//
// A Source numbers every write with the next ResourceVersion, like an etcd
// revision: Put, Delete and Apply (several keys in one transaction sharing
// one version) return the version of the write. Watch replays the retained
// history strictly after the requested version and then follows new writes;
// Compact drops history so that watching from before it fails with an error
// matching driver.ErrExpired, which is how a test drives a Reflector into a
// relist. Advance moves the head without touching a key, as a write to an
// unwatched part of a database would, so that tests can exercise bookmarks
// (Source implements driver.ProgressReporter) and WaitFor.
//
// What a Source does is what a database does: InjectDecodeError puts a
// change that could not be decoded into the history, NotifyProgress sends
// every open watch a Bookmark as a periodic etcd progress notification
// would, and Options.HistoryLimit expires watches that fall behind a
// retention window. To see or steer the calls an informer makes (count
// them, hold one, fail the next, break the open watches), wrap the Source
// in core/informertest's Spy, which works the same on a real adapter.
//
// A Source starts no goroutine of its own.
package memory
