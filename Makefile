# quorumlock: every target works on a fresh Debian machine as root; the
# servers the tests need are installed here when missing.

GO      ?= go
PKGS    ?= ./...
BENCH   ?= .
BENCHTIME ?= 2s
COUNT   ?= 1

.PHONY: test bench bench-redis bench-fencing chaos choose soak sim gobench lint fuzz model deps clean

# Nested modules, each with its own go.mod so that the library's build links none of their
# dependencies (fence/etcdfence: the etcd client, and the etcd server for its tests;
# cmd/redlock-bench: the CLI and its harnesses, with etcd, gonum/plot, porcupine, HdrHistogram
# and a progress bar; driver/rueidisdriver and driver/valkeydriver: the adapters of rueidis and
# valkey-go, the latter generated from the former; redlock/redlockotel: OpenTelemetry).
# ./... stops at their directories: test, lint and deps run them one by one.
MODULES ?= fence/etcdfence cmd/redlock-bench driver/rueidisdriver driver/valkeydriver \
	redlock/redlockotel

# The nested modules require the core (and the CLI the two adapters) at its next release, which
# the repository's workspace, go.work, serves from this checkout: they run in it (MODGO). The
# root module runs on its own go.mod (ROOTGO): in the workspace it would build with the highest
# version any module requires, the CLI's golang.org/x/text and go.yaml.in/yaml among them.
ROOTGO = GOWORK=off $(GO)
MODGO  = GOWORK=$(CURDIR)/go.work $(GO)

# Debian's PostgreSQL keeps its server binaries off PATH, and deps may install it during this
# very run, so recipes that need initdb and postgres look for them when they start.
WITHPG = PATH="$$PATH:$$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort | tail -n 1)"

# Every test, with the race detector, after vet and a gofmt check. One package at a time (-p 1):
# the fault and load tests start real servers and must not share two cores with another package's.
# Then the nested modules' tests, the same way. -p 1 also builds one package at a time, so each
# module's test binaries are compiled first on every core, running no test (-run '^$$'; a build
# error shows again in the run that follows): on a cold cache the root module's build fell from
# 312 s to 174 s, and the run after it links from the cache. The simulator's replay test runs once
# more without the race detector, which shuffles the goroutines of one virtual instant, and the
# bug hunt (the re-injected bugs of -tags simbugs) runs, each bug within 200 schedules.
PREBUILD = $(GO) test -race -count=1 -run '^$$'
test: deps lint
	@GOWORK=off $(PREBUILD) $(PKGS) >/dev/null 2>&1 || true
	$(WITHPG) $(ROOTGO) test -race -count=1 -p 1 -timeout 12m $(PKGS)
	$(ROOTGO) test -count=1 -run TestSimReplays -timeout 5m ./internal/harness/sim/
	$(ROOTGO) test -tags simbugs -count=1 -timeout 5m ./internal/harness/sim/ -run TestSimFindsBugs -sim.hunt 200
	@set -e; for m in $(MODULES); do echo "cd $$m && $(MODGO) test -race -count=1 -p 1 -timeout 12m ./..."; (cd $$m && { GOWORK=$(CURDIR)/go.work $(PREBUILD) ./... >/dev/null 2>&1 || true; } && $(WITHPG) $(MODGO) test -race -count=1 -p 1 -timeout 12m ./...); done

# The benchmark CLI on its embedded default: in-process servers, no Redis needed. It says that
# it builds first: on a fresh machine the first build compiles the CLI's ~150 modules for minutes.
bench:
	@echo "make bench: building cmd/redlock-bench into bin/ (the first build on a fresh machine compiles about 150 modules: minutes on 2 cores; later builds take seconds)"
	$(GO) -C cmd/redlock-bench build -o ../../bin/redlock-bench .
	bin/redlock-bench $(ARGS)

# The published figures: the CLI on real redis-server processes, every scenario.
bench-redis: deps
	@mkdir -p docs/bench
	$(GO) -C cmd/redlock-bench build -o ../../bin/redlock-bench .
	bin/redlock-bench -backend redis-server -scenario healthy -c 1,8,64 -d 5s -o json -plot docs/bench/healthy.svg > docs/bench/healthy.json
	bin/redlock-bench -backend redis-server -scenario slow -delay 30ms -c 1,8 -d 5s -o json > docs/bench/slow.json
	bin/redlock-bench -backend redis-server -scenario dead -dead 2 -c 1,8 -d 5s -o json > docs/bench/dead2.json
	bin/redlock-bench -backend redis-server -scenario dead -dead 3 -c 1 -d 5s -o json > docs/bench/dead3.json
	bin/redlock-bench -backend redis-server -scenario scale -c 1,8 -d 3s -o json -plot docs/bench/scale.svg > docs/bench/scale.json
	bin/redlock-bench -backend redis-server -scenario contended -c 8 -hold 1ms -d 5s -o json -plot docs/bench/contended.svg > docs/bench/contended.json
	@# Per driver (docs/drivers.md): the healthy scenario with the raw quorum loop beside the lock, and the
	@# contended one, every driver's rows alternating in one run.
	bin/redlock-bench -backend redis-server -scenario healthy -driver go-redis,go-redis-pipelined,rueidis,valkey-go -raw -c 1,8,64 -d 5s -o json -plot docs/bench/drivers.svg > docs/bench/drivers.json
	bin/redlock-bench -backend redis-server -scenario contended -driver go-redis,go-redis-pipelined,rueidis,valkey-go -c 8 -hold 1ms -d 5s -o json > docs/bench/drivers-contended.json

# The incident review's duplicate-write benchmark: 1,000,000 jobs, unfenced and fenced.
bench-fencing:
	$(GO) -C cmd/redlock-bench run . fencing $(ARGS)

# Every chaos scenario at full size on real servers (docs/chaos.md); make test runs the quick size.
chaos: deps
	@mkdir -p docs/bench
	$(GO) -C cmd/redlock-bench build -o ../../bin/redlock-bench .
	bin/redlock-bench chaos -json docs/bench/chaos.json $(ARGS)

# The lock-choice table measured here on real redis-server processes (docs/choosing.md).
choose: deps
	@mkdir -p docs/bench
	$(GO) -C cmd/redlock-bench build -o ../../bin/redlock-bench .
	$(WITHPG) bin/redlock-bench choose -backend redis-server -o json -plot docs/bench/choose.svg $(ARGS) > docs/bench/choose.json

# The 500 acquisitions/s load test for longer than the suite runs it.
soak: deps
	$(WITHPG) FENCE_SOAK=$${FENCE_SOAK:-60s} $(GO) -C cmd/redlock-bench test -race -count=1 -run TestLoad500PerSecond -timeout 30m -v ./internal/allocjobs/

# The simulator on new seeds for SIM_TIME (default 10m); a failing seed prints its replay command.
sim:
	$(GO) test -tags simbugs -count=1 -run TestSimFindsBugs -v ./internal/harness/sim/ | grep -e 'found' -e '^---' -e '^ok' -e FAIL
	$(GO) test -race -count=1 -timeout 5m ./internal/harness/sim/
	SIM_TIME=$${SIM_TIME:-10m} $(GO) test -count=1 -run 'TestSim$$' -timeout 0 -v ./internal/harness/sim/ | grep -v -e '^=== ' -e '--- PASS'

# testing.B benchmarks against real redis-server processes.
gobench: deps
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) -count $(COUNT) ./redlock/ ./quorum/
	@# Each adapter's BenchmarkLock (5 masters, c=1 and c=64, allocs/op per cycle): go-redis plain and
	@# auto-pipelined in this module, rueidis and valkey-go in theirs.
	$(GO) test -run '^$$' -bench 'BenchmarkLock' -benchmem -benchtime $(BENCHTIME) -count $(COUNT) ./driver/goredis/
	@set -e; for m in driver/rueidisdriver driver/valkeydriver; do echo "cd $$m && $(GO) test -bench BenchmarkLock -benchmem"; (cd $$m && $(GO) test -run '^$$' -bench 'BenchmarkLock' -benchmem -benchtime $(BENCHTIME) -count $(COUNT) .); done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@if git grep -n -E '^(<<<<<<<|>>>>>>>)( |$$)' -- . >/dev/null 2>&1; then echo "merge conflict markers:"; git grep -n -E '^(<<<<<<<|>>>>>>>)( |$$)' -- .; exit 1; fi
	$(ROOTGO) vet ./... && $(ROOTGO) vet -tags simbugs ./internal/harness/sim/
	@set -e; for m in $(MODULES); do echo "cd $$m && $(MODGO) vet ./..."; (cd $$m && $(MODGO) vet ./...); done
	@# The library links none of the CLI's dependencies: they are the cmd/redlock-bench module's.
	@if $(ROOTGO) list -deps ./redlock/... ./fence/... | grep -E 'etcd|gonum|porcupine|hdrhistogram|progressbar|quorumlock.dev/cmd/'; then \
		echo "the library's packages import the CLI's dependencies (above)"; exit 1; fi
	@# The lock and the fence reach Redis through the driver seam only: the go-redis adapter is
	@# driver/goredis, and no package of the lock's or the fence's imports it.
	@if $(ROOTGO) list -deps ./driver ./redlock/... ./fence/... | grep -E 'go-redis|quorumlock.dev/driver/'; then \
		echo "the lock or the fence imports a Redis client (above): only driver adapters may"; exit 1; fi
	@# Adapters import only the seam (the root module's, goredis, is held to it by internal/layering).
	@set -e; for m in driver/rueidisdriver driver/valkeydriver; do \
		if (cd $$m && $(MODGO) list -f '{{join .Imports "\n"}}' . | grep '^quorumlock.dev/' | grep -v '^quorumlock.dev/driver$$'); then \
			echo "$$m imports the project packages above: an adapter imports only quorumlock.dev/driver"; exit 1; fi; done
	@# quorum and clockdrift, the public basement, import nothing of the project and no Redis client.
	@if $(ROOTGO) list -deps ./quorum ./clockdrift | grep -E 'redis|valkey|quorumlock.dev/' | grep -v -E '^quorumlock.dev/(quorum|clockdrift)$$'; then \
		echo "quorum or clockdrift imports the packages above"; exit 1; fi

# The SPIN models at larger bounds than make test's (docs/model.md): redlock.pml with 2
# acquisitions per client over 6 ticks, exhaustive (state vectors compressed, -DCOLLAPSE) where it
# fits and bitstate (-DBITSTATE) where it does not, Extend and a restart with exact clocks; fence.pml
# with 4 mints and 3 losses; fair.pml's claim over 8 ticks; every pan prints its states and time.
model: deps
	@set -e; d=$$(mktemp -d); cp model/*.pml $$d; cd $$d; \
	for c in "redlock.pml -DCYCLES=2" "redlock.pml -DCYCLES=2 -DINFLIGHT -DTMAX=0" "fence.pml -DMINTS=4 -DLOSSES=3" "fair.pml -DCLAIM -DTMAX=8"; do \
		echo "== $$c (exhaustive, -DCOLLAPSE)"; spin -a $${c#* } $${c%% *} && gcc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM=4096 -o pan pan.c && ./pan -m400000 | grep -E 'errors|states, stored|total actual|elapsed'; done; \
	for c in "-DCYCLES=2 -DSUSPEND" "-DCYCLES=2 -DEXTEND -DEXACT_CLOCKS" "-DCYCLES=2 -DRESTART -DEXACT_CLOCKS" "-DCYCLES=2 -DPAUSE -DNO_MUTEX"; do \
		echo "== redlock.pml $$c (bitstate)"; spin -a $$c redlock.pml && gcc -O2 -w -DSAFETY -DBITSTATE -o pan pan.c && ./pan -w30 -m400000 | grep -E 'errors|states, stored|elapsed'; done; \
	rm -rf $$d

# A short run of each fuzz target.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzValidity -fuzztime 30s ./clockdrift/

# redis-server, PostgreSQL, etcd (redlock-bench choose), iptables (the chaos partition) and gcc
# (the chaos clock shim) from Debian's packages, when missing and we may install them.
deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v etcd >/dev/null 2>&1 || missing="$$missing etcd-server"; \
	command -v iptables-restore >/dev/null 2>&1 || missing="$$missing iptables"; \
	{ command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1; } || missing="$$missing gcc"; \
	{ command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || missing="$$missing postgresql"; \
	command -v mariadbd >/dev/null 2>&1 || missing="$$missing mariadb-server"; \
	command -v spin >/dev/null 2>&1 || missing="$$missing spin"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "missing:$$missing (apt-get install$$missing)" >&2; exit 1; \
		fi; \
	fi
	$(ROOTGO) mod download
	@# In a workspace, go mod download fetches every module of the workspace's graph, most of which
	@# no build needs: listing the packages and their tests fetches what they import.
	@set -e; for m in $(MODULES); do (cd $$m && $(MODGO) list -deps -test ./... >/dev/null); done

clean:
	$(GO) clean -testcache
