# mageguard — build, test, benchmark.
GO      ?= go
BIN     := bin/mageguard
PKGS    := ./...

.PHONY: build test bench fmt vet demo clean acceptance-eval acceptance-sweep learn learn-gamma

build:
	$(GO) build -o $(BIN) ./cmd/mageguard

# The whole test suite (what .ci/run and the README call).
test:
	$(GO) vet $(PKGS)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) test -count=1 $(PKGS)

# Benchmarks of every package (results also in bin/bench.txt), then the
# model's benchmarks redone in PyTorch float32 and printed side by side with
# the ratios (needs /usr/bin/python3 with torch; skipped otherwise).
bench:
	@mkdir -p bin
	@$(GO) test -run '^$$' -bench . -benchtime 3x $(PKGS) > bin/bench.txt; status=$$?; cat bin/bench.txt; exit $$status
	@if /usr/bin/python3 -c 'import torch' 2>/dev/null; then \
	  /usr/bin/python3 scripts/bench_torch.py --go bin/bench.txt; \
	else echo "bench: no /usr/bin/python3 with torch, PyTorch comparison skipped"; fi

# The main job on the bundled data: a tiny random Qwen3 trained for a few
# GRPO steps on CPU (configs/tiny.yaml), into runs/tiny; then what to run next.
demo: build
	rm -rf runs/tiny
	$(BIN) train --config configs/tiny.yaml --out runs/tiny
	@echo
	@echo "Next: the held-out report of the last step, then an eval of the final checkpoint on a quick set"
	@echo "(an attack run with a label-1 action and a benign run per suite):"
	@echo "  less runs/tiny/eval-8/report.md"
	@echo "  $(BIN) data subset data/agentdojo-mini/eval.jsonl --out runs/eval-quick.jsonl --attack-per-suite 1 --benign-per-suite 1 --positive-frac 1 --max-turns 4"
	@echo "  $(BIN) eval --config configs/tiny.yaml --model runs/tiny/checkpoint-8 --data runs/eval-quick.jsonl --out runs/eval-quick"
	@echo "  less runs/eval-quick/report.md"

# The long acceptance run of `mageguard eval` (not part of `make test`): a random
# tiny checkpoint evaluated over the bundled eval split as MAGE and as judge-only
# with structured decoding, then compared; outputs stay in $(ACCEPTANCE_OUT).
# ACCEPTANCE_LIMIT=N evaluates the first N trajectories only (0 = all 74).
ACCEPTANCE_OUT   ?= runs/acceptance
ACCEPTANCE_LIMIT ?= 0
acceptance-eval:
	mkdir -p $(ACCEPTANCE_OUT)
	MAGEGUARD_ACCEPTANCE=$(abspath $(ACCEPTANCE_OUT)) MAGEGUARD_ACCEPTANCE_LIMIT=$(ACCEPTANCE_LIMIT) \
	  $(GO) test -count=1 -v -timeout 6h -run '^TestAcceptanceEval$$' ./cmd/mageguard

# The acceptance run of `mageguard sweep`: the 2 x 2 tiny grid of
# configs/sweep-tiny.yaml, killed with kill -9 as soon as its second point has
# written its first metrics line (an event, not a delay: it holds on any
# machine speed) and resumed, then replayed point by point from --plan and
# --collect'ed; the two summaries must be identical. Outputs in
# runs/acceptance-sweep.
acceptance-sweep: build
	scripts/acceptance-sweep.sh runs/acceptance-sweep

# Proof that training makes a guard (docs/learning.md): synthetic train and
# held-out files, a tiny model warm-started with SFT, then GRPO; the
# held-out table of random init, judge-only, SFT and SFT + GRPO. Leaves
# the guard in $(LEARN_OUT)/guard/, its eval config in
# $(LEARN_OUT)/guard.yaml and the table in $(LEARN_OUT)/results.md.
LEARN_OUT ?= runs/learn
learn: build
	scripts/learn.sh $(LEARN_OUT)

# The γ experiment (docs/learning.md): GRPO from a myopic warm start with
# γ = 0 and γ = 0.5 under a tight memory length threshold, 3 seeds each;
# the table of F1 and recall at gap >= 3 in $(LEARN_GAMMA_OUT)/results.md.
LEARN_GAMMA_OUT ?= runs/learn-gamma
learn-gamma: build
	scripts/learn-gamma.sh $(LEARN_GAMMA_OUT)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
