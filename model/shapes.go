package model

// GenerationShape returns the graph shape Generate runs a batch with: rows
// prompts, the longest of longest tokens, each continued by up to maxNew
// tokens run as B rows (rows rounded up to a power of two up to 8, then to a
// multiple of 8) over a KV cache of capacity S per row (longest + maxNew
// rounded up to a power of two up to 64, at least 32, then to a multiple of
// 64). Every graph of the batch shares them, so a run compiles few; the
// finer steps above 8 rows and 64 slots keep the padding, which every
// decoding step pays for (filler rows, attention over empty slots), under
// 12.5% and 64 slots.
func GenerationShape(rows, longest, maxNew int) (B, S int) {
	return coarseThenStep(rows, 1, 8), coarseThenStep(longest+maxNew, minCapacityBucket, 64)
}

// coarseThenStep rounds n up to a power of two (at least lo) while that is
// at most step, and above step to a multiple of step.
func coarseThenStep(n, lo, step int) int {
	if b := bucket(n, lo); b <= step {
		return b
	}
	return (n + step - 1) / step * step
}

// PrefillTokens is the tokens per row of a batch's prefill graph: the
// longest prompt (of longest tokens) after the prefix of shared tokens that
// every prompt starts with, prefilled once at batch 1 (0 = none), rounded up
// to a power of two (at least 16).
func PrefillTokens(longest, shared int) int {
	return bucket(longest-shared, minPromptBucket)
}

// MinSharedGenerationPrefix is the fewest leading tokens the prompts of a
// batch must share for Generate to prefill them once.
const MinSharedGenerationPrefix = minSharedPrefix
