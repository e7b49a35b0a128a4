// Package proxy is a small TCP proxy for fault injection: it sits between a
// client and a real server on loopback, and a test cuts every live
// connection (Cut), refuses new ones for a while (Pause), or holds every
// byte while keeping the connections open (Freeze: a server that hangs, a
// network that drops packets) to make the client see a network fault
// without touching the server. Resume ends every fault. Close waits for
// every goroutine it started.
//
// It is ours rather than toxiproxy because the faults the reliability suite
// needs are only these three, and an in-process proxy needs no extra
// server.
//
// It sits on the bottom floor (it imports nothing of the module) so that
// the adapters' test kits can use it; integration/proxy is the same API
// for the integration tests.
package proxy
