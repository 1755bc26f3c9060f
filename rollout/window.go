package rollout

// Window returns the half-open range [start, end) of turns a trajectory of
// len(labels) turns is cut to when it is longer than maxTurns: one window of
// maxTurns consecutive turns that contains the first label-1 action when
// there is one, else the first maxTurns turns. With maxTurns <= 0 or a short
// trajectory, the window is the whole trajectory.
//
// When the first positive does not fit in the first maxTurns turns, the
// window is centred on it (⌊(maxTurns−1)/2⌋ turns before it, clamped to the
// trajectory's end), so the memory sees both the lead-up to the attack (the
// observation that carried the injection) and the actions that follow it
// (multi-step attacks).
func Window(labels []int, maxTurns int) (start, end int) {
	n := len(labels)
	if maxTurns <= 0 || n <= maxTurns {
		return 0, n
	}
	first := -1
	for t, l := range labels {
		if l == 1 {
			first = t
			break
		}
	}
	if first < maxTurns { // no positive, or it already fits in the first window
		return 0, maxTurns
	}
	start = min(first-(maxTurns-1)/2, n-maxTurns)
	return start, start + maxTurns
}
