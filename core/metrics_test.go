package core

import "sync/atomic"

type countingMetrics struct {
	NoopMetrics
	decode, panics, lists atomic.Int32
	relists, restarts     atomic.Int32
	applied               atomic.Uint64
}

func (m *countingMetrics) InformerMetrics(string) InformerMetrics { return m }
func (m *countingMetrics) DecodeFailed()                          { m.decode.Add(1) }
func (m *countingMetrics) HandlerPanicked(string)                 { m.panics.Add(1) }
func (m *countingMetrics) WatchRestarted(error)                   { m.restarts.Add(1) }
func (m *countingMetrics) Listed(relist bool, _ int, _ error) {
	m.lists.Add(1)
	if relist {
		m.relists.Add(1)
	}
}
func (m *countingMetrics) Applied(rv ResourceVersion) { m.applied.Store(uint64(rv)) }
