# camproxy — see README.md. Every target works on a fresh clone.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
PKGS      := ./...
FUZZTIME  ?= 20s

.PHONY: run build test check bench fuzz docker clean

## run: start camproxy serve on the built-in defaults (or $$CAMPROXY_CONFIG)
run:
	$(GO) run ./cmd/camproxy serve --log-format text

## build: a static binary in bin/camproxy
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/camproxy ./cmd/camproxy

## test: every test, with the race detector, against a real Redis and the real node clients
test:
	./scripts/test-deps.sh
	CAMPROXY_REQUIRE_REDIS=1 CAMPROXY_REQUIRE_NODE=1 CAMPROXY_REQUIRE_CHROMIUM=1 $(GO) test -race -count=1 -timeout 15m $(PKGS)

## check: gofmt, go vet, and golangci-lint when installed
check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@if command -v golangci-lint >/dev/null 2>&1; then golangci-lint run; else echo "golangci-lint not installed; skipped"; fi

## bench: camproxy's added latency against the same fake upstream called directly
bench:
	$(GO) run ./bench/latency

## fuzz: run every native fuzz target for FUZZTIME each
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## docker: build the container image (needs a Docker engine)
docker:
	@docker info >/dev/null 2>&1 || { echo "make docker: no Docker engine is running here; the Dockerfile builds the same static binary as 'make build'"; exit 1; }
	docker build --build-arg VERSION=$(VERSION) -t camproxy:$(VERSION) .

clean:
	rm -rf bin camproxy-data
