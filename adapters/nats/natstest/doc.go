// Package natstest is the test kit of the NATS adapter: conformance
// harnesses (core/conformance.Harness) for a KV bucket and for an event
// stream, on an embedded server or an embedded JetStream cluster
// (internal/testkit/servers), which also read the truth directly and inject
// faults. The adapter's conformance tests, the reliability suite
// (integration/reliability) and the benchmarks (bench/) all drive the
// adapter through them.
//
// Most tests need only NewKV or NewEventStream with a Config naming the
// server:
//
//	srv := servers.StartNATS(t)
//	h := natstest.NewKV(t, natstest.Config{Server: srv})
//	rv, err := h.Put(ctx, "a", 1)
package natstest
