// Package shard splits the keys of a source between N replicas, so that
// each caches and handles only its share, and hands shards over between
// replicas without ever letting two of them own one at the same time.
//
// # Assignment
//
// Keys map to a fixed number of virtual shards (Of: a stable hash of the
// key, the count an option fixed for the deployment); shards map to the
// live members by rendezvous hashing with optional weights (Assign). It
// depends only on the set of members, so every replica computes the same
// assignment from the same membership, and a member that joins takes only
// the shards it wins (one that leaves gives up only its own).
//
// # Membership and ownership
//
// A Sharder is one replica's part: Run joins the membership of a Backend
// (NewEtcd: a lease with the member and shard keys attached; NewPostgres:
// a members table whose rows expire by the server's clock, and an owners
// table; NewKube: coordination.k8s.io Leases, judged expired by each
// replica's own observation as client-go's leader election does; NewNATS:
// a key-value bucket whose member keys carry the lease as a per-key TTL
// the server expires, and whose shard keys name their owner's session)
// with an ID, an optional weight and a lease time. It renews the
// lease every third of it, measuring the lease from before each renewal
// was sent, so that its own view never outlives the server's. It reads
// the members, computes the assignment and takes each shard it wins once
// the shard is free. It looks every third of the lease and, on every
// backend, at once when a member joins or leaves gracefully or a shard is
// released (an etcd watch, a NATS KV watch, Postgres LISTEN/NOTIFY on a
// connection of its own, a Kubernetes watch of the group's Leases that
// ignores renewals): a shard is free when it is released by its previous
// owner, or left behind when that owner's lease expired — a dead, frozen or partitioned member leaves
// within the lease time, even with its TCP connection open. Each take
// gives the shard a new, higher term (etcd: the create revision of the
// shard's key; Postgres: a sequence; Kubernetes: the shard Lease's
// leaseTransitions; NATS: the stream sequence of the shard key's write).
//
// Exclusivity: a replica hands out work for a shard (Begin) only while it
// owns it and more than a third of its lease is left; a new owner takes a
// shard only after the old one released it (after its work drained) or
// after its lease expired on the server. Work that outlives that — a
// process frozen inside a handler — is what the term is for: write with
// Etcd.Fence (a transaction comparison) or Postgres.Fence (a check that
// locks the ownership row in your transaction) or NATS.Fence (a publish
// option: the server refuses a message into the bucket once the shard's
// key moved), and a deposed owner's write is refused. (Kube has no fencing helper: the Kubernetes API has no
// transaction spanning a Lease and another object; pass the term to what
// you write and compare it there.)
//
// # Caches and handoff
//
// NewSource wraps a ListerWatcher so that the informer over it caches only
// the owned shards' keys, filtering at decode with the filter package's
// enter/leave semantics. A handoff, on the old owner: Begin refuses the
// shard's keys, the work in flight finishes (up to
// Options.DrainTimeout), the informer relists without the shard (its keys
// leave the cache as deletes) and the shard is released. On the new
// owner: the shard is taken, the informer relists with it (its keys enter
// as adds) and the shard counts as loaded (Owns). Why a relist rather than
// one informer per shard: see Source. A ListerWatcher that filters by
// shard itself (ShardFilter: a relay.Downstream over a relay with
// per-shard subjects) is handed the owned set before each List and Watch,
// so that other shards' keys never reach the process. Handler gates event handlers by
// Begin, so that they see the enter events and not the leaves (a key that
// moved was not deleted). A controller Manager in sharded mode
// (controller.ManagerOptions.Sharder) reconciles only loaded shards' keys
// and drops the others when a worker takes them.
//
// # Visibility
//
// An Observer sees members, owned shards and handoffs with their
// durations; package shard/shardstatus keeps them for a JSON page and
// Prometheus metrics, and a sharded Manager wires one in.
//
// # Limits
//
//   - Each handoff round relists the informer from the source (one list per
//     round, not per shard); a relist replays the keys kept as updates
//     with the old object equal to the new, as any relist does.
//   - Through the relay with per-shard subjects (relay.Options.Shards
//     equal to Options.Shards), a replica's Downstream consumes only its
//     shards' subjects (Source hands it the owned set: ShardFilter), and
//     confirms versions only when its shards are quiet for one round of
//     reads: under writes to them that never pause, its WaitFor waits
//     (see package relay). Without the relay's option, each replica reads
//     every change and drops other shards' at decode.
package shard
