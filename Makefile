# Podium: build, run, test, bench.
#   make run         build in release mode and start the server on port 6379 with conf/podium.conf
#   make test        cargo test, then Redis's own Tcl suites against the release binary
#   make suites      only the Tcl suites (tests/redis-suite/run.sh fetches Redis 7.0's tests once)
#   make unit-test   only cargo test
#   make bench       criterion benches (hot paths, skip list at 1M)

CARGO ?= cargo
PORT ?= 6379
SUITE = tests/redis-suite/run.sh
SUITE_PORT ?= 21111
PODIUM = target/release/podium

# Redis's Tcl suites in external mode (a fresh Podium per suite). FULL_SUITES pass in full;
# RATCHETS (suite:min-passed) are still being completed (what each lacks: README, "Redis's own test suites").
FULL_SUITES = unit/type/zset unit/type/set unit/type/string unit/type/hash unit/sort unit/scan unit/expire unit/type/incr unit/protocol unit/info-command unit/quit unit/type/list unit/type/list-2 unit/type/list-3 unit/latency-monitor unit/slowlog unit/tracking unit/functions unit/introspection unit/geo unit/bitops unit/bitfield unit/hyperloglog unit/type/stream unit/keyspace unit/multi unit/scripting
RATCHETS = unit/pubsub:28 unit/type/stream-cgroups:46
# Suites in the suites' native mode (they start Podium themselves): NATIVE_FULL pass in full,
# NATIVE_SUITES are suite:min-passed.
NATIVE_FULL = unit/tracking unit/acl unit/acl-v2 unit/dump unit/slowlog unit/latency-monitor integration/rdb unit/aofrw unit/geo unit/bitops unit/hyperloglog unit/type/stream unit/info unit/introspection-2
NATIVE_SUITES = unit/oom-score-adj:4 unit/auth:9 unit/pubsubshard:9 unit/maxmemory:18 unit/other:24 unit/pubsub:29 unit/limits:1 unit/querybuf:2 unit/networking:4 integration/logging:2 unit/shutdown:7 unit/obuf-limits:8 unit/pause:13 unit/introspection:41 integration/redis-cli:28 integration/redis-benchmark:8 unit/functions:92 unit/scripting:186 integration/aof:40 integration/aof-multi-part:28 unit/bitfield:18 unit/type/stream-cgroups:52 integration/corrupt-dump:58

.PHONY: build run test unit-test suites bench clean

build:
	$(CARGO) build --release

run: build
	$(PODIUM) conf/podium.conf --port $(PORT)

unit-test:
	$(CARGO) test --release

suites: build
	bash $(SUITE) --server '$(PODIUM) --port {port} --save ""' --port $(SUITE_PORT) $(FULL_SUITES)
	@set -e; for r in $(RATCHETS); do \
	  bash $(SUITE) --server '$(PODIUM) --port {port} --save ""' --port $(SUITE_PORT) --min-passed $${r#*:} $${r%%:*}; \
	done
	bash $(SUITE) --native $(PODIUM) --port $(SUITE_PORT) $(NATIVE_FULL)
	@set -e; for r in $(NATIVE_SUITES); do \
	  bash $(SUITE) --native $(PODIUM) --port $(SUITE_PORT) --min-passed $${r#*:} $${r%%:*}; \
	done

test: unit-test suites

bench:
	$(CARGO) bench

clean:
	$(CARGO) clean
