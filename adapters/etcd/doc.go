// Package etcd keeps an informer's cache in step with the keys under one
// etcd v3 prefix. Its ListerWatcher is a core.ListerWatcher[T] whose
// resource version is the etcd revision.
//
// The package is named etcd, as is the server; import it under an alias
// that says what it is:
//
//	import etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
//
//	lw, err := etcdinformer.New(etcdinformer.Config[User]{
//		Client: cli,      // a *clientv3.Client, used as is (TLS, auth...)
//		Prefix: "/users", // watches "/users/..."; keys are what follows
//	})
//	inf := core.NewSharedIndexInformer[User](lw, core.InformerOptions[User]{Name: "users"})
//
// # Keys and prefixes
//
// Prefix names a directory: a "/" is appended when it does not end in one,
// so Prefix "/a" covers "/a/x" but never "/ab/x", and the object key of
// "/a/x" is "x". Keys deeper down keep their slashes ("/a/b/c" is "b/c").
// Set LiteralPrefix to match Prefix byte for byte instead ("user-" covers
// "user-1", "user-10"; "/a" covers "/ab"; a key equal to Prefix has the
// empty object key). The empty Prefix covers every key in etcd, and the
// object key is then the whole etcd key.
//
// # Values
//
// Values decode with a Codec: JSON[T] by default, Raw for the bytes as they
// are (a ListerWatcher[[]byte]), or any DecodeFunc. A value that does not
// decode is reported as an event whose Err is a *core.DecodeError naming
// the prefix, the key and the revision (never the bytes); the informer
// reports it through its error handler, and the watch goes on.
//
// # How it reads
//
// List reads the prefix in pages of PageSize keys. The first page is read
// at the current revision R and every later page is pinned to R (the
// header of a pinned read reports the current revision, not R, so R is
// taken from the first page only), continuing after the last key read; the
// pages together are one snapshot at R, and List returns R.
//
// Watch(from) watches from revision from+1 with the previous value of
// deleted keys (PrevKV, so deletes carry the last object while etcd still
// has it), progress notifications turned into Bookmarks, and RequireLeader.
// A put of a new key is Added, of an existing key Modified. When etcd has
// compacted the revisions after from, the watch fails with an error that
// matches core.ErrExpired (and rpctypes.ErrCompacted), and the informer
// relists. While the server is unreachable the etcd client reconnects and
// resumes the watch by itself; when it gives up (no leader, for example)
// Next returns an error and the informer watches again from the last
// revision it applied, without relisting.
//
// The Watcher implements core.ProgressRequester with etcd's
// RequestProgress on the watch's own gRPC stream, so that
// informer.WaitFor(rev) returns for a revision written under another
// prefix. The ListerWatcher implements core.HeadReader.
//
// # Server settings and permissions
//
// The user needs read access to the prefix's range (etcd role permission
// READ on [Prefix, range end)). etcd sends unrequested progress
// notifications every --watch-progress-notify-interval (10 minutes by
// default); WaitFor does not depend on them. Keep enough history
// (--auto-compaction-retention) for a watch to resume after the outages you
// expect; a compacted position costs a full relist, nothing more.
package etcd
