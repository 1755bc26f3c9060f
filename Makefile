# mageguard — build, test, benchmark.
GO      ?= go
BIN     := bin/mageguard
PKGS    := ./...

.PHONY: build test bench fmt vet demo clean acceptance-eval acceptance-sweep serve-load serve-crash serve-abuse mcp-e2e mcp-overhead fuzz parquet-flip learn learn-grid
.PHONY: mcp-abuse

build:
	$(GO) build -o $(BIN) ./cmd/mageguard

# mageguard on the PATH: $(PREFIX)/bin/mageguard (PREFIX=$$HOME/.local for
# a user's own; DESTDIR for packaging). `go install ./cmd/mageguard` does the
# same into $$(go env GOPATH)/bin.
.PHONY: install
PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/mageguard

# The whole test suite (what .ci/run and the README call): vet, gofmt,
# staticcheck (fetched from the Go module proxy at a pinned version;
# staticcheck.conf), every package's tests, then the concurrent packages'
# again under the race detector. That pass is -short: it leaves out the
# tests that run a model on simplego's parallel scheduler, in which GoMLX
# v0.26 itself races (its exec.go's bookkeeping of buffers), and which the
# pass before runs.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
RACE_PKGS   := ./serve/... ./mcpgate/... ./rollout/... ./sweep/... ./internal/lock/...
test:
	$(GO) vet $(PKGS)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) run $(STATICCHECK) $(PKGS)
	$(GO) test -count=1 -timeout 30m $(PKGS)
	$(GO) test -count=1 -timeout 30m -race -short $(RACE_PKGS)

# Benchmarks of every package (results also in bin/bench.txt, with the load
# average around them: scripts/loadwatch.sh), the GRPO
# update with full fine-tuning and with LoRA side by side, then the
# model's benchmarks and grpo's update benchmark redone in PyTorch float32,
# with 1 and 2 threads, and printed side by side with the ratios against
# PyTorch's fastest setting — or "too loaded, rerun" where either side ran
# above BENCH_MAX_LOAD (default 2.5) — (needs /usr/bin/python3 with torch:
# apt-get install -y python3-torch python3-numpy libopenblas0-pthread;
# skipped otherwise). docs/performance.md says how to read it.
bench:
	@mkdir -p bin
	@scripts/loadwatch.sh $(GO) test -run '^$$' -bench . -benchtime 3x $(PKGS) > bin/bench.txt; status=$$?; cat bin/bench.txt; exit $$status
	@echo "GRPO update on the demo's batch, full fine-tuning beside a LoRA adapter of rank 16 (grpo/bench_test.go):"
	@awk '/^Benchmark(Update|LoRAUpdate)-/ { n = $$1; sub(/-[0-9]+$$/, "", n); \
	  for (i = 3; i < NF; i++) { if ($$(i+1) == "ns/op") t = $$i / 1e9; if ($$(i+1) == "cpu-s/op") c = $$i; \
	    if ($$(i+1) == "peak-heap-MB") h = $$i; if ($$(i+1) == "optimizer-MB") o = $$i }; \
	  printf "  %-20s %7.2f s/op (%.2f CPU s)  %6.0f MB peak heap  %8.2f MB optimizer state\n", n, t, c, h, o }' bin/bench.txt
	@if /usr/bin/python3 -c 'import torch' 2>/dev/null; then \
	  /usr/bin/python3 scripts/bench_torch.py --go bin/bench.txt && \
	  $(GO) build -o $(BIN) ./cmd/mageguard && rm -rf bin/bench-tiny && \
	  $(BIN) model init --config configs/tiny.yaml --out bin/bench-tiny 2>/dev/null && \
	  /usr/bin/python3 scripts/bench_update_torch.py --ckpt bin/bench-tiny --go bin/bench.txt; \
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

# The long acceptance run of `mageguard eval` (scripts/acceptance-eval): a random
# tiny checkpoint evaluated over the bundled eval split as MAGE and as judge-only
# with structured decoding, then compared; outputs stay in $(ACCEPTANCE_OUT).
# ACCEPTANCE_LIMIT=N evaluates the first N trajectories only (0 = all 74).
ACCEPTANCE_OUT   ?= runs/acceptance
ACCEPTANCE_LIMIT ?= 0
acceptance-eval: build
	mkdir -p $(ACCEPTANCE_OUT)
	timeout 6h $(GO) run ./scripts/acceptance-eval --bin $(BIN) --out $(ACCEPTANCE_OUT) --limit $(ACCEPTANCE_LIMIT)

# The acceptance run of `mageguard sweep`: the 2 x 2 tiny grid of
# configs/sweep-tiny.yaml, killed with kill -9 as soon as its second point has
# written its first metrics line (an event, not a delay: it holds on any
# machine speed) and resumed, then replayed point by point from --plan and
# --collect'ed; the two summaries must be identical. Outputs in
# runs/acceptance-sweep.
acceptance-sweep: build
	scripts/acceptance-sweep.sh runs/acceptance-sweep

# Proof that training makes a guard (docs/learning.md): synthetic train and
# held-out files, a tiny model taught to copy, warm-started with 400 SFT
# steps, then GRPO with two seeds; the held-out table of random init,
# judge-only, SFT and SFT + GRPO (the GRPO seeds side by side); its time is
# in docs/learning.md. Leaves the guard
# in $(LEARN_OUT)/guard/, its eval config in $(LEARN_OUT)/guard.yaml and the
# table in $(LEARN_OUT)/results.md.
LEARN_OUT ?= runs/learn
learn: build
	scripts/learn.sh $(LEARN_OUT)

# Labels alone (docs/learning.md): synthetic data, copy pretraining, a leaky
# warm start (SFT on a memory that keeps each earlier identifier with
# probability 0.5), then GRPO from per-action labels only over
# gamma x lambda x seeds through `mageguard sweep` (configs/synth-grid.yaml),
# each cell evaluated on a held-out file. Leaves the warm start in
# $(LEARN_GRID_OUT)/warm/, each cell's guard in
# $(LEARN_GRID_OUT)/g<gamma>-l<lambda>-s<seed>/guard/, their eval config in
# $(LEARN_GRID_OUT)/guard.yaml, the table in $(LEARN_GRID_OUT)/results.md and
# the sweep's heatmaps (mean and spread over seeds) in $(LEARN_GRID_OUT)/sweep/.
LEARN_GRID_OUT     ?= runs/learn-grid
LEARN_GRID_GAMMAS  ?= 0 0.5 0.9
LEARN_GRID_LAMBDAS ?= 0 1
LEARN_GRID_SEEDS   ?= 1 2 3
LEARN_GRID_LOSSES  ?=
learn-grid: build
	LEARN_GRID_GAMMAS="$(LEARN_GRID_GAMMAS)" LEARN_GRID_LAMBDAS="$(LEARN_GRID_LAMBDAS)" LEARN_GRID_SEEDS="$(LEARN_GRID_SEEDS)" \
	  LEARN_GRID_LOSSES="$(LEARN_GRID_LOSSES)" \
	  scripts/learn-grid.sh $(LEARN_GRID_OUT)

# The load test of `mageguard serve` on loopback (scripts/serve-load): a
# tiny checkpoint served, one session alone then SERVE_LOAD_SESSIONS sessions
# x SERVE_LOAD_STEPS steps at once; no step lost or answered twice; prints
# throughput, p50/p99 latency and the mean generation batch size, and writes
# them to $(SERVE_LOAD_OUT). Bounded: 32 x 8 = 256 steps, a 15-minute timeout.
SERVE_LOAD_SESSIONS ?= 32
SERVE_LOAD_STEPS    ?= 8
SERVE_LOAD_OUT      ?= runs/serve-load.json
serve-load: build
	mkdir -p $(dir $(SERVE_LOAD_OUT))
	timeout 15m $(GO) run ./scripts/serve-load load --bin $(BIN) --out $(SERVE_LOAD_OUT) \
	  --sessions $(SERVE_LOAD_SESSIONS) --steps $(SERVE_LOAD_STEPS)

# The crash test of `mageguard serve`: sessions under load, the server killed
# with SIGKILL after 40 answered steps, restarted on the same --state; every
# answered step's memory and decision must be stored, no session
# half-updated, and the agents' retries (by step index) store nothing twice.
serve-crash: build
	timeout 15m $(GO) run ./scripts/serve-load crash --bin $(BIN)

# The abuse test of `mageguard serve` (scripts/serve-load): a normal
# session of SERVE_ABUSE_STEPS steps alone, then beside a hostile session
# sending long actions and messages as fast as it is answered; the normal
# session must keep its decisions and its median and mean latency within
# 2x of running alone. Figures in $(SERVE_ABUSE_OUT). 72 steps take ~9 s
# alone, about the fair share's 10 s window (serve/fairshare.go), so the
# check sees the share hold, not only the allowance before it engages.
SERVE_ABUSE_STEPS ?= 72
SERVE_ABUSE_OUT   ?= runs/serve-abuse.json
serve-abuse: build
	mkdir -p $(dir $(SERVE_ABUSE_OUT))
	timeout 15m $(GO) run ./scripts/serve-load abuse --bin $(BIN) --out $(SERVE_ABUSE_OUT) --steps $(SERVE_ABUSE_STEPS)

# `mageguard mcp` with real MCP clients and servers (not part of `make test`:
# it installs npm packages into a temporary folder, so it needs the npm
# registry): the official conformance suite against server-everything and
# the Go SDK's conformance server, alone and through the gateway; the
# TypeScript SDK client through the gateway in front of server-filesystem,
# where a write an injected instruction asks for is blocked (and forwarded
# with --monitor); the latency the guard adds per tool call (tiny checkpoint,
# CPU). See docs/mcp.md. MCP_E2E_CALLS calls are timed each way.
MCP_E2E_OUT   ?= runs/mcp-e2e
MCP_E2E_CALLS ?= 60
mcp-e2e:
	MCP_E2E_CALLS=$(MCP_E2E_CALLS) scripts/mcp-e2e.sh $(MCP_E2E_OUT)

# The loop from the guard's own traffic back to training (scripts/replay-e2e,
# not part of `make test`): synth trajectories played through the real `mageguard serve` and
# `mageguard mcp --monitor` (a random tiny checkpoint, configs/tiny.yaml)
# in front of an MCP server that answers with the recorded observations,
# the true labels posted as an operator's, `data import sessions` compared
# with the originals and validated, then 2 steps of `train` and an `eval`
# on the imports (docs/data.md, "Your own traffic"). Each phase's time is
# logged; the imports, the checkpoint and the report go to $(REPLAY_E2E_OUT).
.PHONY: replay-e2e
REPLAY_E2E_OUT          ?= runs/replay-e2e
REPLAY_E2E_TRAJECTORIES ?= 4
replay-e2e: build
	rm -rf $(REPLAY_E2E_OUT)
	timeout 30m $(GO) run ./scripts/replay-e2e --bin $(BIN) --out $(REPLAY_E2E_OUT) \
	  --trajectories $(REPLAY_E2E_TRAJECTORIES)

# What `mageguard mcp` itself adds to a tools/call over stdio (not part of
# make test; it asserts nothing): the gateway on a random tiny checkpoint
# (configs/tiny.yaml, --monitor) in front of a one-tool downstream, driven
# by the Go SDK's client, MCP_OVERHEAD_CALLS calls one at a time; prints the
# p50 and p90 of the call, the guard step, the downstream and the rest (the
# gateway's own) with the load average, and writes them to
# $(MCP_OVERHEAD_OUT). See scripts/mcp-overhead and docs/mcp.md.
MCP_OVERHEAD_CALLS ?= 60
MCP_OVERHEAD_OUT   ?= runs/mcp-overhead.json
mcp-overhead: build
	rm -rf bin/mcp-tiny
	$(BIN) model init --config configs/tiny.yaml --out bin/mcp-tiny >/dev/null
	$(GO) build -o bin/mcp-overhead ./scripts/mcp-overhead
	mkdir -p $(dir $(MCP_OVERHEAD_OUT))
	bin/mcp-overhead -mageguard $(BIN) -config configs/tiny.yaml -model bin/mcp-tiny -calls $(MCP_OVERHEAD_CALLS) -out $(MCP_OVERHEAD_OUT)

# Hostile MCP servers and clients against the real `mageguard mcp` (not part
# of make test; loopback only, a few minutes at most): an endless tools/list
# cursor, 30,000 unanswered sampling requests, a 200 MB --upstream-url body,
# 64 initialize POSTs of one token to --listen, a rug pull, 100,000
# notifications in one call. Each must get a clear error or a correct
# answer, the gateway must not crash and its peak RSS (VmHWM) stay under
# 2 GB; prints time and peak RSS a case with the load average, and writes
# them to $(MCP_ABUSE_OUT). See scripts/mcp-abuse and docs/reliability.md.
MCP_ABUSE_OUT ?= runs/mcp-abuse.json
mcp-abuse: build
	rm -rf bin/mcp-abuse-tiny
	$(BIN) model init --config configs/tiny.yaml --out bin/mcp-abuse-tiny >/dev/null
	$(GO) build -o bin/mcp-abuse ./scripts/mcp-abuse
	mkdir -p $(dir $(MCP_ABUSE_OUT))
	timeout 10m bin/mcp-abuse -mageguard $(BIN) -config configs/tiny.yaml -model bin/mcp-abuse-tiny -out $(MCP_ABUSE_OUT)

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
	./internal/parquetcheck:FuzzParquetCheck \
	./model/safetensors:FuzzSafetensors \
	./model:FuzzParseConfig \
	./config:FuzzLoad \
	./rollout/prompt:FuzzParseToolCall \
	./rollout/prompt:FuzzEscapeDelimiters \
	./model/tokenizer:FuzzEncodeUntrusted \
	./model/tokenizer:FuzzSplit \
	./model/tokenizer:FuzzParse \
	./model/tokenizer:FuzzLoadWithin \
	./eval:FuzzDecodeDecisions \
	./eval:FuzzReadReport \
	./internal/strictjson:FuzzCheck \
	./internal/strictjson:FuzzObject \
	./serve:FuzzParseRequest \
	./mcpgate:FuzzDecodeAudit \
	./mcpgate:FuzzDecodePinFile
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

# `mageguard mcp` tried offline (docs/mcp.md#trying-it-offline): the gateway
# in front of cmd/mcp-files (list_directory, read_file, write_file over
# runs/mcp-demo/files, stdio), a benign call and the call an injected note
# asks for, then the guard's decisions from the audit log. The guard is
# MCP_DEMO_MODEL (make demo's checkpoint-best), else a random tiny model
# written by model init. No network.
.PHONY: mcp-demo
MCP_DEMO_MODEL ?= runs/tiny/checkpoint-best
mcp-demo: build
	$(GO) build -o bin/mcp-files ./cmd/mcp-files
	$(GO) build -o bin/mcp-demo ./scripts/mcp-demo
	@model="$(MCP_DEMO_MODEL)"; \
	if [ ! -f "$$model/config.json" ]; then \
	  model=runs/mcp-demo-model; \
	  echo "mcp-demo: no $(MCP_DEMO_MODEL) (make demo writes it): a random tiny model in $$model instead"; \
	  [ -f "$$model/config.json" ] || $(BIN) model init --config configs/tiny.yaml --out $$model; \
	fi; \
	bin/mcp-demo --mageguard $(BIN) --files bin/mcp-files --model "$$model" --out runs/mcp-demo

# Every mageguard command README.md and docs/*.md show in code blocks, run
# as written (scripts/docs-check) with mageguard installed under
# $(DOCS_CHECK_PREFIX) and on the PATH, after make demo (whose runs/tiny the
# docs' eval commands read); eval gets --limit 2. Placeholders, servers,
# whole sweeps, GPU-sized configs and inputs of runs the docs only describe
# are skipped with the reason; cmd/mageguard's TestDocCommandsParse checks
# every command's syntax in make test. Logs in runs/docs-check/logs.
.PHONY: docs-check
DOCS_CHECK_PREFIX ?= $(abspath runs/docs-check/prefix)
docs-check:
	$(MAKE) install PREFIX=$(DOCS_CHECK_PREFIX)
	PATH=$(DOCS_CHECK_PREFIX)/bin:$$PATH $(MAKE) demo
	PATH=$(DOCS_CHECK_PREFIX)/bin:$$PATH $(GO) run ./scripts/docs-check --log runs/docs-check/logs
