package etcdinformer

// MaxBatch and KeptBatch expose maxBatch and keptBatch to the tests.
const (
	MaxBatch  = maxBatch
	KeptBatch = keptBatch
)
