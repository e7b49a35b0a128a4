// Package proxy is a small TCP proxy for fault injection: it sits between a
// client and a real server on loopback, and a test cuts every live
// connection (Cut), refuses new ones for a while (Pause), or holds every
// byte while keeping the connections open (Freeze). Resume ends every
// fault. Close waits for every goroutine it started.
//
// The proxy lives in internal/testkit/proxy, on the bottom floor, so that
// the adapters' test kits use it without importing integration/; this
// package is the same API (Proxy is an alias) for the integration tests.
package proxy
