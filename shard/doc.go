// Package shard splits the keys of a source between N replicas, so that
// each caches and handles only its share, and hands shards over between
// replicas without ever letting two of them own one at the same time.
//
// Keys map to a fixed number of virtual shards (Of: a stable hash of the
// key); shards map to the live members by rendezvous hashing (Assign),
// which every replica computes alike from the same membership and which
// moves, when a member joins, only the shards it wins.
package shard
