# mageguard — build, test, benchmark.
GO      ?= go
BIN     := bin/mageguard
PKGS    := ./...

.PHONY: build test bench fmt vet demo clean

build:
	$(GO) build -o $(BIN) ./cmd/mageguard

# The whole test suite (what .ci/run and the README call).
test:
	$(GO) vet $(PKGS)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) test -count=1 $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
