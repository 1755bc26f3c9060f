package grpo

// Shapes of the training graphs, for callers that size them before a run
// (package plan): the same rounding the trainer applies.

// PaddedLength is the length a micro-batch's rows (or its shared prefix, or
// its targets) are padded to: n rounded up to 8, 16, then steps of a quarter
// of the power of two below it.
func PaddedLength(n int) int { return bucket(n) }

// GraphRows is the row count of the training graph of a micro-batch of n
// rows: n rounded up to a power of two, at most microBatchSize.
func GraphRows(microBatchSize, n int) int {
	t := Trainer{cfg: Config{MicroBatchSize: microBatchSize}}
	return t.rowsFor(n)
}

// MinSharedPrefix is the fewest leading tokens a micro-batch's rows must
// share for grpo.shared_prefix to compute them once.
const MinSharedPrefix = minSharedPrefix
