// Package shardtest holds what tests of sharded replicas share: a log of
// the work each replica did for each key, and the check that no two
// replicas worked on one key at overlapping times.
package shardtest
