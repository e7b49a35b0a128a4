// Package relaytest drives a relay.Downstream against real servers for
// tests: New wraps the conformance.Harness of a source (a Postgres table,
// an etcd prefix), runs a relay.Relay over its ListerWatcher into a fresh
// JetStream stream, and returns a conformance.Harness whose ListerWatcher is
// a relay.Downstream over that stream. Writes, versions and Truth go to
// the source, so the conformance suite and the reliability suite check that
// the downstream reports the source's own versions.
package relaytest
