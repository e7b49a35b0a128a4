package etcdinformer

// MaxBatch exposes maxBatch to the tests.
const MaxBatch = maxBatch
