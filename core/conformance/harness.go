package conformance

import (
	"context"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// Harness is one fresh, empty watched set on a real server (a new etcd
// prefix, a new table, a new KV bucket, a new namespace...), in the shape of
// gocloud's drivertest.Harness: an adapter writes its glue once, here, and
// the conformance suite, the reliability suite (integration/reliability)
// and the benchmarks (bench/) all drive the adapter through it.
//
// Put and Delete write to the server directly (never through the
// ListerWatcher) and may be called from several goroutines at once, each
// writer with its own keys.
type Harness[T any] interface {
	// ListerWatcher is the adapter under test.
	ListerWatcher() driver.ListerWatcher[T]
	// Put creates or updates key so that the object the ListerWatcher
	// reports for it carries version n; returns the RV of that write.
	Put(ctx context.Context, key string, n int64) (core.ResourceVersion, error)
	// Delete removes key; returns the RV of the delete. Deleting an absent
	// key is not an error (the reliability workload deletes at random; the
	// conformance suite never does): it returns a version read then.
	Delete(ctx context.Context, key string) (core.ResourceVersion, error)
	// Version extracts n from an object the ListerWatcher produced.
	Version(obj T) int64
}

// Expirer is implemented by a Harness that can make every version up to
// the current head unreachable for Watch (etcd compaction, dropping the
// slot, purging the stream...).
type Expirer interface {
	Expire(ctx context.Context) error
}

// Unwatched is implemented by a Harness whose source has writes outside
// the watched set (another prefix, table, subject, namespace).
type Unwatched interface {
	// PutUnwatched writes outside the watched set and returns that
	// write's RV.
	PutUnwatched(ctx context.Context) (core.ResourceVersion, error)
}

// KeyMapper is implemented by a Harness whose ListerWatcher reports a key
// other than the one given to Put, such as a Kubernetes harness that
// reports "namespace/name" for the name it wrote. Without it the suite
// expects events and List items to carry the key exactly as written.
type KeyMapper interface {
	// EventKey returns the key the ListerWatcher reports for key.
	EventKey(key string) string
}

// Transactor is implemented by a Harness that can write several keys in one
// transaction (an etcd Txn, a Postgres transaction). The suite then checks
// that the transaction's events share one RV and arrive in one batch.
type Transactor interface {
	// PutAll creates or updates every key in one transaction so that each
	// carries version n; returns the RV of the transaction.
	PutAll(ctx context.Context, keys []string, n int64) (core.ResourceVersion, error)
}

// Dropper is implemented by a Harness that can make the watched set gone
// for good (DROP TABLE, delete the bucket or stream, delete the resource's
// CustomResourceDefinition). The suite then checks that an open watch ends
// with an error matching driver.ErrPermanent (driver.Permanent), which stops
// the informer instead of retrying forever.
type Dropper interface {
	Drop(ctx context.Context) error
}

// Truth is implemented by a Harness that can read the source directly,
// bypassing the adapter: what the reliability suite compares caches with.
type Truth interface {
	// Truth returns every watched key (as given to Put) with the version
	// of its current object.
	Truth(ctx context.Context) (map[string]int64, error)
	// Head is the source's current version, read directly.
	Head(ctx context.Context) (core.ResourceVersion, error)
}

// Fault is a kind of fault a Harness can inject between its ListerWatcher
// and the server.
type Fault string

// The fault kinds.
const (
	Cut     Fault = "cut"     // every connection between adapter and server cut
	Pause   Fault = "pause"   // connections cut and refused while writes go on
	Restart Fault = "restart" // server killed and restarted with its data
	Expire  Fault = "expire"  // the adapter's position made unusable (compaction, slot drop, purge)
	Freeze  Fault = "freeze"  // server alive but silent: bytes held, connections open
)

// Faults is implemented by a Harness that can break the path between its
// ListerWatcher and the server (through integration/proxy, or by
// restarting the server).
type Faults interface {
	// Faults lists the kinds Inject supports.
	Faults() []Fault
	// Inject starts fault f. The caller writes while the fault lasts if
	// writable, then calls end (which may be nil).
	Inject(t testing.TB, ctx context.Context, f Fault) (end func(), writable bool)
	// Heal ends any outage (proxy resumed, server running).
	Heal(t testing.TB)
}
