// Package rollout runs the guard over trajectories: the shadow-memory
// chains of docs/design.md#the-guard-loop. At each turn the memory manager
// updates the memory from what happened since its last update
// (m_t = M(m_{t−1}, s_{t−1})) and the judge decides on the pending action
// from the memory alone (d_t = J(a_t | m_t)). Training samples G chains per
// trajectory through Run, eval runs one greedy chain, and serve drives the
// loop one step at a time for live sessions (Step).
//
// The loop renders its calls with the prompts of rollout/prompt, constrains
// them with rollout/grammar when decoding is structured, and hands them to
// a generator (the contract is rollout/generate; rollout/localgen runs a
// Qwen3 model in this process, rollout/openai a server). It reads each
// judge call's decision score from its log-probs (score.go), and renders
// the calls and target completions of a supervised warm start (teach.go).
package rollout
