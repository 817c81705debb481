# edge-agent — see README.md.
GO ?= go
PKGS := ./...

.PHONY: test race bench fuzz lint build

build:
	$(GO) build -o bin/edge-agent ./cmd/edge-agent

# The test suite: real Badger, real Mosquitto, embedded JetStream.
test:
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff
	$(GO) test -count=1 -timeout 40m $(PKGS)

race:
	$(GO) test -race -count=1 -timeout 60m $(PKGS)

# Benchmarks and side-by-side harnesses; figures go into BENCHMARKS.md.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s -timeout 60m $(PKGS)

# Each fuzz target for FUZZTIME (default 20s).
FUZZTIME ?= 20s
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff
