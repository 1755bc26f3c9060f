# mageguard — build, test, benchmark.
GO      ?= go
BIN     := bin/mageguard
PKGS    := ./...

.PHONY: build test bench fmt vet demo clean acceptance-eval acceptance-sweep fuzz parquet-flip

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
# GRPO steps on CPU (configs/tiny.yaml), into runs/tiny.
demo: build
	rm -rf runs/tiny
	$(BIN) train --config configs/tiny.yaml --out runs/tiny

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
# configs/sweep-tiny.yaml, killed with kill -9 after its first point and
# resumed, then replayed point by point from --plan and --collect'ed; the two
# summaries must be identical. Outputs in runs/acceptance-sweep.
acceptance-sweep: build
	scripts/acceptance-sweep.sh runs/acceptance-sweep

# Go's native fuzzing of every parser of outside input, one target at a
# time, each for FUZZTIME (their seed corpora also run in `make test`).
# FUZZ=FuzzParquet runs one target; FUZZPARALLEL sets the fuzzing workers.
# FUZZMINIMIZE bounds the minimizing of each new input (Go's default, 60s,
# spent whole runs minimizing the first input of the targets with KB-sized
# seeds; 1s, most of FuzzParquet's). Results and times: docs/reliability.md.
FUZZTIME     ?= 60s
FUZZPARALLEL ?= 1
FUZZMINIMIZE ?= 10x
FUZZ         ?=
FUZZ_TARGETS := \
	./dataset:FuzzDecodeJSON \
	./dataset:FuzzParquet \
	./model:FuzzSafetensors \
	./model:FuzzParseConfig \
	./config:FuzzLoad \
	./rollout:FuzzParseToolCall \
	./rollout:FuzzEscapeDelimiters \
	./model/tokenizer:FuzzEncodeUntrusted \
	./model/tokenizer:FuzzSplit \
	./model/tokenizer:FuzzParse \
	./eval:FuzzDecodeDecisions \
	./eval:FuzzReadReport \
	./internal/strictjson:FuzzCheck
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  if [ -n "$(FUZZ)" ] && [ "$(FUZZ)" != "$$name" ]; then continue; fi; \
	  echo "fuzz: $$name ($$pkg) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) -parallel $(FUZZPARALLEL) $$pkg || exit 1; \
	done

# `data validate` on copies of the bundled split's Parquet file with one
# byte changed, under ulimit -v 6000000 and timeout 30 (every byte of the
# footer, every STRIDE-th of the data); see scripts/parquet-flip.sh.
STRIDE ?= 1
parquet-flip: build
	scripts/parquet-flip.sh $(STRIDE)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
