package pginformer

import (
	"slices"
	"strings"
)

// known returns key's kept values, by column name (for tests: what the
// TOAST memory holds).
func (t *tableState) known(key string) []knownValue {
	var vl []knownValue
	for col, m := range t.vals {
		if data, ok := m[key]; ok {
			vl = append(vl, knownValue{col, data})
		}
	}
	slices.SortFunc(vl, func(a, b knownValue) int { return strings.Compare(a.col, b.col) })
	return vl
}
