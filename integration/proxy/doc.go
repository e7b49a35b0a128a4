// Package proxy is a small TCP proxy for fault injection: it sits between a
// client and a real server on loopback, and a test cuts every live
// connection (Cut) or refuses new ones for a while (Pause, Resume) to make
// the client see a network fault without touching the server. Close waits
// for every goroutine it started.
//
// It is ours rather than toxiproxy because the faults the reliability suite
// needs are only these two, and an in-process proxy needs no extra server.
package proxy
