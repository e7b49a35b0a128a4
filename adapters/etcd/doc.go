// Package etcdinformer keeps an informer's cache in step with the keys under
// one etcd v3 prefix. Most programs need only NewPrefix, passed to
// core.NewSharedIndexInformer:
//
//	users, err := etcdinformer.NewPrefix(ctx, cli, "/users", etcdinformer.Options[User]{})
//	inf := core.NewSharedIndexInformer[User](users, core.InformerOptions[User]{Name: "users"})
//
// A Prefix is a driver.ListerWatcher[T] whose resource version is the etcd
// revision; it also implements driver.ProgressReporter, driver.ProgressIntervaler,
// driver.HealWaiter and driver.HeadReader.
// The directory is adapters/etcd; the package is etcdinformer.
//
// # The client is yours
//
// NewPrefix takes a *clientv3.Client and uses it as it is: its endpoints,
// TLS, auth and dial settings are the caller's, the Prefix never closes it,
// and several Prefixes (and the program's own writes, leases and elections)
// can share it. Closing it ends the informer: a list or watch on a closed
// client fails with an error matching driver.ErrPermanent.
//
// Give the client gRPC keepalives, so that it gives up a connection to a
// member that stopped answering (frozen, or behind a connection that went
// half-open) and moves to another endpoint; without them that takes as long
// as the operating system takes to give up on the connection, many minutes.
// gRPC pings no more often than every 10s, whatever DialKeepAliveTime says:
//
//	cli, err := clientv3.New(clientv3.Config{
//		Endpoints:            endpoints,
//		DialTimeout:          5 * time.Second,
//		DialKeepAliveTime:    10 * time.Second, // ping an idle connection this often (10s at the least)
//		DialKeepAliveTimeout: 3 * time.Second,  // and give it up after this long without an answer
//	})
//
// A watch does not wait for that (see "Stuck watches" below): it notices a
// silent member within about two progress intervals and is reopened on a
// stream of its own, which the client balances onto another member.
//
// # Keys and prefixes
//
// The prefix names a directory: a "/" is appended when it does not end in
// one, so the prefix "/a" covers "/a/x" but never "/ab/x", and the object key
// of "/a/x" is "x". Keys deeper down keep their slashes ("/a/b/c" is "b/c").
// Set Options.LiteralPrefix to match the prefix byte for byte instead
// ("user-" covers "user-1", "user-10"; "/a" covers "/ab"; a key equal to the
// prefix has the empty object key). The empty prefix covers every key in
// etcd, and the object key is then the whole etcd key.
//
// # Values
//
// Values decode with a codec.Codec: codec.JSON[T] by default, codec.Raw for the
// bytes as they are (a Prefix[[]byte]), or any codec.Funcs. A value that
// does not decode, or whose codec panics, is reported as an event whose Err
// is a *driver.DecodeError naming the prefix, the key and the revision (never
// the bytes); the informer reports it through its error handler, and the
// watch goes on.
//
// # How it reads
//
// List reads the prefix in pages of Options.PageSize keys. The first page is
// read at the current revision R and every later page is pinned to R (the
// header of a pinned read reports the current revision, not R, so R is taken
// from the first page only), continuing after the last key read; the pages
// together are one snapshot at R, and List returns R.
//
// Watch(from) watches from revision from+1 with the previous value of
// deleted keys (PrevKV, so deletes carry the last object while etcd still
// has it), progress notifications turned into Bookmarks, and RequireLeader;
// each etcd watch response is one batch. A put of a new key is Added, of an
// existing key Modified. When etcd has compacted the revisions after from,
// the watch fails with an error that matches driver.ErrExpired (and
// rpctypes.ErrCompacted), and the informer relists. While the server is
// unreachable the etcd client reconnects and resumes the watch by itself;
// when it gives up (no leader, for example) Watch returns that error and the
// informer watches again from the last revision it applied, without
// relisting. When its context ends, Watch returns driver.Stopped.
//
// Each request on WatchOptions.Progress becomes an etcd RequestProgress on
// the watch's own gRPC stream, answered by a Bookmark at etcd's revision, so
// that informer.WaitFor(rev) returns for a revision written under another
// prefix. etcd drops a progress request that reaches it while the watch is
// still catching up on history; the watch asks again every 250ms until it is
// answered.
//
// # Partial sync
//
// Options.Where (package filter) syncs only part of the prefix. The
// conditions on filter.Key at the top level of the filter (Eq, Prefix, Lt,
// Le, Gt, Ge: filter.And(filter.Prefix(filter.Key, "tenant-1/"), ...))
// are pushed down: they narrow the key range List reads and Watch watches,
// so etcd never sends the other keys. Everything else (conditions on value
// fields, Or, In, Where) is evaluated here on each decoded value: such
// values still cross the network and are decoded. A put that makes a key
// stop matching reaches handlers as a delete carrying its last matching
// value, one that makes it match as an add. A condition marked
// filter.Server that is not a key range is refused by NewPrefix.
//
// # Stuck watches and waits that say why
//
// A Prefix declares a progress interval (driver.ProgressIntervaler,
// Options.ProgressInterval, DefaultProgressInterval = 1s): after each
// interval in which a watch delivered nothing, the informer asks it for
// progress, which a live member answers with a Bookmark at once. A watch
// that has heard nothing at all from etcd for 1s with a request unanswered
// reads the head revision (with RequireLeader, bounded to 1s) to find out
// why, and ends: with that read's error when it fails (etcdserver: no
// leader, connection refused, context deadline exceeded), or, when the
// cluster answers, as a watch whose member is silent. Either way the
// informer reports the error through its error handler and its sync status
// and watches again from the last revision it applied, without relisting;
// each Watch has a gRPC stream of its own, so a reopened watch is not held
// by the silent stream of another. For 30s after a member was found silent
// so, a watch whose stream goes to it (its first response, the created
// notification, names the member) or that hears nothing within 300ms
// leaves at once for a new stream, which the client balances onto the
// next member (up to four times). If it is not answered for
// driver.StuckIntervals intervals, the informer ends it itself
// (driver.ErrWatchStuck). A negative Options.ProgressInterval turns this off.
//
// List and Head read with RequireLeader: a member without a leader (cut off
// from its cluster) refuses at once with "etcdserver: no leader", which the
// client retries on another member, or returns after its retries when it
// has no other; the informer's sync status, and WaitForCacheSync's timeout,
// then name that cause. A Prefix is a driver.HealWaiter: while the informer
// backs off after a failure, it reads the head revision (every 100ms,
// growing to 1s) and retries as soon as etcd answers again — at once too
// when etcd answers the first read after a failure that looked like an
// outage, however it was worded (a killed member's reads end in "context
// deadline exceeded", not "connection refused"): a member that restarted,
// or a failure at the very instant of a heal, costs no backoff.
//
// # Server settings and permissions
//
// The user needs read access to the prefix's range (etcd role permission
// READ on [prefix, range end)). etcd sends unrequested progress
// notifications every --watch-progress-notify-interval (10 minutes by
// default); neither WaitFor nor stuck-watch detection depends on them. Keep enough history
// (--auto-compaction-retention) for a watch to resume after the outages you
// expect; a compacted position costs a full relist, nothing more.
//
// Package etcdtest holds this adapter's conformance.Harness, for tests and
// benchmarks that drive a Prefix against a real server.
package etcdinformer
