// Package servers starts real servers for the tests: Postgres with logical
// replication, an embedded etcd, an embedded nats-server with JetStream and
// a real kube-apiserver. Each listens on loopback on a port it picks, keeps
// its data in a temp dir, stops when the test ends, and prints its log when
// the test failed. Under CI=true a server that cannot start fails the test;
// elsewhere the test is skipped with a message saying how to get the server.
//
// It sits on the bottom floor (it imports nothing of the module but
// internal/testkit/proxy) so that the adapters' test kits can start servers
// without importing integration/, the top floor; integration/harness is the
// same API for the integration tests and examples.
package servers
