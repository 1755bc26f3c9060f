package model

// GenerationShape returns the graph shape Generate runs a batch with: rows
// prompts, the longest of longest tokens, each continued by up to maxNew
// tokens run as B rows (rows rounded up to a power of two) over a KV cache
// of capacity S per row (longest + maxNew rounded up to a power of two, at
// least 32). Every graph of the batch shares them, so a run compiles few.
func GenerationShape(rows, longest, maxNew int) (B, S int) {
	return bucket(rows, 1), bucket(longest+maxNew, minCapacityBucket)
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
