// Package shardstatus makes a shard.Sharder visible: a Recorder, added as
// the Sharder's Observer, keeps the members, the shards owned here with
// their terms, the handoffs in progress and the recent ones with their
// durations; it serves them as JSON (an http.Handler, for a status page
// or /debug/shards) and exports them as Prometheus metrics (Register).
//
// The controller Manager in sharded mode wires one in by itself
// (Manager.ShardStatus, its metrics on Manager.Registry).
package shardstatus
