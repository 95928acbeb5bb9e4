# Podium: build, run, test, bench.
#   make run    build in release mode and start the server on port 6379 with conf/podium.conf
#   make test   cargo test, then Redis's own Tcl suites against the release binary
#   make bench  criterion benches (hot paths, skip list at 1M)

CARGO ?= cargo
PORT ?= 6379
SUITE = ../shared/conformance/redis-suite.sh
SUITE_PORT ?= 21111
PODIUM = target/release/podium

# Suites that pass in full, and suites still being completed with their ratchet (--min-passed):
# the rest of those need streams (see README).
FULL_SUITES = unit/type/zset unit/type/set unit/type/string unit/type/hash unit/sort unit/scan unit/expire unit/type/incr unit/protocol unit/info-command unit/quit
RATCHETS = unit/keyspace:49 unit/multi:34

.PHONY: build run test unit-test suites bench clean

build:
	$(CARGO) build --release

run: build
	$(PODIUM) conf/podium.conf --port $(PORT)

unit-test:
	$(CARGO) test --release

suites: build
	bash $(SUITE) --server '$(PODIUM) --port {port}' --port $(SUITE_PORT) $(FULL_SUITES)
	@set -e; for r in $(RATCHETS); do \
	  bash $(SUITE) --server '$(PODIUM) --port {port}' --port $(SUITE_PORT) --min-passed $${r#*:} $${r%%:*}; \
	done

test: unit-test suites

bench:
	$(CARGO) bench

clean:
	$(CARGO) clean
