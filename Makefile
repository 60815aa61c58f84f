# camproxy — see README.md. Every target works on a fresh clone.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
PKGS      := ./...
FUZZTIME  ?= 20s
SOAK      ?= 20m

.PHONY: run build test check bench demo fuzz faults soak docker clean

## run: start camproxy serve on the built-in defaults (or $$CAMPROXY_CONFIG)
run:
	@echo "make run: building bin/camproxy (the first build downloads and compiles the dependencies: about a minute)…"
	@$(MAKE) --no-print-directory build BUILD_QUIET=@
	@echo "make run: starting bin/camproxy serve (data plane 127.0.0.1:8080, admin and dashboard 127.0.0.1:9090/ui)"
	./bin/camproxy serve --log-format text

## build: a static binary in bin/camproxy, built as the release builds it (scripts/release-build.sh):
## one set of compiled packages serves make run, make build, make test and the release
build:
	$(BUILD_QUIET)CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o bin/camproxy ./cmd/camproxy

## test: every test, with the race detector, against a real Redis, the real node clients and Chromium;
## bin/camproxy is built once for the tests that run the binary; the ten slowest tests are listed at the end.
## -trimpath: a package compiled once is reused from the build cache whatever folder the clone is in.
## GORACE=atexit_sleep_ms=0: a race binary exits at once, not after the detector's 1 s sleep (40 test
## binaries and the processes tests start from them); races are reported when they happen, not at exit
TESTJSON ?= bin/test.json
## -p 4: most of the suite's time is tests waiting on processes they started (agents, node
## clients, Redis, camproxy itself), so four packages at once keep two cores busy; -vet=off:
## make check runs go vet, and go test's vet pass per package would repeat it on every run;
## -ldflags=-w: test binaries without DWARF, which nothing reads (race reports and panics
## symbolize from the runtime's own tables): a link takes ~40% less CPU, and make test is CPU-bound
TESTFLAGS ?= -p 4 -vet=off -ldflags=-w
test:
	./scripts/test-deps.sh
	@echo "make test: building bin/camproxy once for the tests that run it"
	@$(MAKE) --no-print-directory build BUILD_QUIET=@
	@mkdir -p $(dir $(TESTJSON)); start=$$(date +%s); status=0; \
	GORACE=atexit_sleep_ms=0 CAMPROXY_BIN=$(CURDIR)/bin/camproxy CAMPROXY_REQUIRE_REDIS=1 CAMPROXY_REQUIRE_NODE=1 CAMPROXY_REQUIRE_CHROMIUM=1 \
	  $(GO) tool gotestsum --format standard-quiet --jsonfile $(TESTJSON) -- -race -trimpath -count=1 -timeout 15m $(TESTFLAGS) $(PKGS) || status=$$?; \
	echo; echo "make test: the ten slowest tests (s):"; \
	$(GO) tool gotestsum tool slowest --jsonfile $(TESTJSON) --threshold 1ms --num 200 | awk '$$2 !~ /\//' | head -10; \
	echo "make test: $$(( $$(date +%s) - start )) s, exit $$status"; exit $$status

## check: gofmt, go vet, golangci-lint when installed, actionlint over the workflows, and the vulnerability scan
check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@if command -v golangci-lint >/dev/null 2>&1; then golangci-lint run; else echo "golangci-lint not installed; skipped"; fi
	$(GO) tool actionlint
	@$(MAKE) --no-print-directory vulncheck

## vulncheck: govulncheck over the source (./...) against the database built from the pinned
## golang.org/x/vulndb (scripts/vulndb.pin), offline, read by internal/vulngate. Fails (exit 3) only
## on a vulnerable function the code can reach; vulnerable packages imported or modules required
## but never called are listed as informational and do not fail.
## docs/operations.md says how to read it and how the database updates. VULNCHECK_ARGS replaces ./...
## VULNCHECK_STDLIB=report (the default here) lists the standard library's reachable vulnerabilities,
## which only a newer Go fixes, without failing; the release workflow sets fail and builds on the newest patch.
.PHONY: vulncheck
VULNCHECK_STDLIB ?= report
vulncheck:
	GO=$(GO) VULNCHECK_STDLIB=$(VULNCHECK_STDLIB) ./scripts/vulncheck.sh $(VULNCHECK_ARGS)

## reproduce: build the release twice (two copies of the tree, two empty build caches: a full
## compile each, minutes) and compare the archives, SBOMs and SHA256SUMS byte for byte;
## REPRODUCE_TARGETS (linux/amd64 unless set), REPRODUCE_CACHE=shared for this machine's cache
.PHONY: reproduce
reproduce:
	VERSION=$(VERSION) COMMIT=$(COMMIT) GO=$(GO) ./scripts/reproduce.sh $(REPRODUCE_TARGETS)

## bench: camproxy's added latency against the same fake upstream called directly
bench:
	$(GO) run ./bench/latency

## demo: the learning loop closing in seconds (scripted agent and optimiser models; proves the plumbing, not model quality); DEMO_ARGS adds flags
demo:
	$(GO) run ./bench/demo $(DEMO_ARGS)

## bench-load: camproxy vs a bare fasthttp proxy vs direct, open loop and at saturation (issue 9); BENCH_LOAD_ARGS adds flags
.PHONY: bench-load
bench-load:
	$(GO) run ./bench/load -json bench/load/results.json $(BENCH_LOAD_ARGS)

## bench-replay: replay stats over 100k and 1M synthesised episodes (from the tau-bench runs): peak RSS flat and under 1 GiB, MB/s; each target PASS/MISS (the 1M run takes minutes)
.PHONY: bench-replay
REPLAY_BENCH_EPISODES ?= 100000,1000000
bench-replay:
	cd replay && REPLAY_BENCH_EPISODES=$(REPLAY_BENCH_EPISODES) $(GO) test -run '^$$' -bench StatsScale -benchtime=1x -timeout 60m .

## faults: the fault matrix (upstream, CAM, Redis, replay sinks, process), as a table
faults:
	./scripts/faults.sh

## soak: a steady load with a fault injected every minute; SOAK=20m by default
soak:
	$(GO) run ./bench/soak -duration $(SOAK)

## fuzz: run every native fuzz target for FUZZTIME each
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## docker: build the image IMAGE:VERSION (IMAGE=ghcr.io/camproxy/camproxy unless set; needs a Docker engine)
## and check that what a node pulls (the gzipped layers) stays under 40 MB
docker:
	@docker info >/dev/null 2>&1 || { echo "make docker: no Docker engine is running here; the Dockerfile builds the same static binary as 'make build'"; exit 1; }
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(or $(IMAGE),ghcr.io/camproxy/camproxy):$(VERSION) .
	@img=$(or $(IMAGE),ghcr.io/camproxy/camproxy):$(VERSION); \
	  disk=$$(docker image inspect -f '{{.Size}}' $$img); pull=$$(docker save $$img | gzip -c | wc -c); \
	  echo "image $$img: $$((pull / 1000000)) MB to pull (gzipped), $$((disk / 1000000)) MB unpacked"; \
	  if [ "$$pull" -gt 40000000 ]; then echo "make docker: the image is over the 40 MB target"; exit 1; fi

clean:
	rm -rf bin camproxy-data

## release-build: the release's binaries for every target in dist/ (scripts/release-build.sh; no Docker).
## `make test` runs the same script for this machine's target (deploy/release_test.go); the
## cross targets cost ~2 min each on two cores, so they build here and in the release workflow.
.PHONY: release-build
release-build:
	VERSION=$(VERSION) COMMIT=$(COMMIT) GO=$(GO) ./scripts/release-build.sh -o dist
