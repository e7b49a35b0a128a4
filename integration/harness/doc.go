// Package harness starts real servers for the tests: Postgres with logical
// replication, an embedded etcd, an embedded nats-server with JetStream and
// a real kube-apiserver. Each listens on loopback on a port it picks, keeps
// its data in a temp dir, stops when the test ends, and prints its log when
// the test failed. Under CI=true a server that cannot start fails the test;
// elsewhere the test is skipped with a message saying how to get the server.
//
// The launchers live in internal/testkit/servers, on the bottom floor, so
// that the adapters' test kits use them without importing integration/;
// this package is the same API (its types are aliases) for the integration
// tests and the examples.
package harness
