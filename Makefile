# edge-agent — see README.md.
GO ?= go
PKGS := ./...

# Every target builds and tests with the Go release named in go.mod's
# toolchain line (the go command fetches it from the module proxy once):
# the machine's Go or a GOTOOLCHAIN=local in the environment or in
# `go env -w` would otherwise pick the compiler and standard library.
# `make GOTOOLCHAIN=local …` still overrides it on purpose.
GO_TOOLCHAIN := $(shell sed -n 's/^toolchain //p' go.mod)
export GOTOOLCHAIN := $(GO_TOOLCHAIN)

.PHONY: test race bench bench-peers fuzz lint staticcheck build dist toolchain

# The commit a build names when Go's VCS stamping records none: in a git
# worktree (its .git is a file, which Go does not look into) or under
# GOFLAGS=-buildvcs=false (CI containers, against git's ownership check).
# Go's own vcs.revision wins when there is one (agent.LinkedCommit).
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
MODIFIED := $(shell test -n "$$(git status --porcelain 2>/dev/null)" && echo true)
SRC_LDFLAGS := -X main.commit=$(COMMIT) -X main.modified=$(MODIFIED)

build:
	$(GO) build -ldflags '$(SRC_LDFLAGS)' -o bin/edge-agent ./cmd/edge-agent

# Fails unless the go command and the binaries of make build / make dist
# are of go.mod's toolchain release.
toolchain:
	@v=$$($(GO) env GOVERSION); test "$$v" = "$(GO_TOOLCHAIN)" || { echo "toolchain: go is $$v, go.mod names $(GO_TOOLCHAIN)"; exit 1; }
	@for b in bin/edge-agent bin/edge-agent-linux-*; do [ -f "$$b" ] || continue; \
	  v=$$($(GO) version "$$b" | awk '{print $$2}'); \
	  test "$$v" = "$(GO_TOOLCHAIN)" || { echo "toolchain: $$b built by $$v, go.mod names $(GO_TOOLCHAIN)"; exit 1; }; \
	  echo "toolchain: $$b $$v"; done
	@echo "toolchain: $(GO_TOOLCHAIN)"

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

# The shared peers harness (../shared/bench-peers) against this checkout, the
# agent at its defaults (EDGE_MQTT_LISTEN=1: straight to --mqtt-listen;
# EDGE_CENTRAL_LAYOUT=1 or 2: that layout).
bench-peers:
	bench/peers.sh

# Each fuzz target for FUZZTIME (default 20s).
FUZZTIME ?= 20s
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# staticcheck at a pinned release (2026.2.2: Go 1.26), built by the go command.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
staticcheck:
	$(STATICCHECK) $(PKGS)

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff

# Release artefacts in bin/: static binaries for linux/amd64, linux/arm64
# and linux/armv7, and a Debian package of each (systemd unit, user,
# /etc/edge-agent/agent.yaml, /var/lib/edge-agent) built by nfpm.
VERSION ?= 0.1.0+git$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
NFPM ?= $(shell command -v nfpm 2>/dev/null || echo $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2)
DIST_LDFLAGS := -s -w -X main.version=$(VERSION) $(SRC_LDFLAGS)
# GOARCH:GOARM:name:debian-arch ("-": no GOARM)
DIST_TARGETS := amd64:-:amd64:amd64 arm64:-:arm64:arm64 arm:7:armv7:armhf
dist:
	@mkdir -p bin
	@set -e; for t in $(DIST_TARGETS); do \
	  set -- $$(echo $$t | tr : ' '); goarch=$$1 goarm=$${2#-} name=$$3 debarch=$$4; \
	  echo "== bin/edge-agent-linux-$$name"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$goarch GOARM=$$goarm $(GO) build -trimpath -ldflags '$(DIST_LDFLAGS)' \
	    -o bin/edge-agent-linux-$$name ./cmd/edge-agent; \
	  mkdir -p bin/pkg && cp bin/edge-agent-linux-$$name bin/pkg/edge-agent; \
	  gzip -9n < deploy/debian/changelog > bin/pkg/changelog.gz; \
	  ARCH=$$debarch VERSION='$(VERSION)' $(NFPM) package --config deploy/nfpm.yaml --packager deb --target bin/; \
	done
	@rm -rf bin/pkg; ls -l bin/
