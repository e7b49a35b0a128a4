// Package keyshard is the one hash that maps a key to its virtual shard,
// shared by package shard (assignment, filtering at decode) and package
// relay (per-shard subjects), so that the relay publishes a key on the
// subject of the very shard the sharder gives it. It imports nothing of
// ours: relay must not import shard (shard's tests import relay).
package keyshard

import (
	"fmt"
	"hash/fnv"
)

// Hash is the stable 64-bit hash of a key: FNV-1a, mixed by splitmix64's
// finalizer so that keys differing in their last bytes spread over the
// whole range. Stable across processes, platforms and releases: replicas
// (and relays) of different builds must agree on it, so it never changes.
func Hash(key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return Mix(h.Sum64())
}

// Mix is splitmix64's finalizer.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Of returns the virtual shard of key among shards (0 ≤ Of < shards); it
// panics if shards is not positive.
func Of(key string, shards int) int {
	if shards <= 0 {
		panic(fmt.Sprintf("shard.Of: %d shards", shards))
	}
	return int(Hash(key) % uint64(shards))
}
