# Podium: build, run, test, bench.
#   make run         build in release mode and start the server on port 6379 with conf/podium.conf
#   make test        cargo test, Redis's own Tcl suites against the release binary, the instance
#                    suites, fuzzing and the compose scenarios, in two lanes at once
#                    (make test-lanes, tools/lanes.sh; see below)
#   make test-serial the same one after the other (slower; a lane's load kept out)
#   make suites      only the Tcl suites (tests/redis-suite/run.sh fetches Redis 7.0's tests once)
#   make suites-long integration/replication whole (make test leaves out its longest test)
#   make tls-suites  every native suite over TLS (make test runs the TLS_SUITES subset)
#   make instance-suites  Redis's Sentinel suite whole and the CLUSTER_UNITS of its cluster
#                    suite (tests/redis-suite/instances.sh; part of make test)
#   make cluster-suite  Redis's cluster suite whole (about 12 minutes here)
#   make cluster-suite-tls  the same with the bus, replication and clients over TLS
#   make unit-test   the generated-tables check (tools/check-generated.sh), then cargo test
#                    (make cargo-test: cargo test alone)
#   make fuzz        the four fuzz targets, FUZZ_SECONDS each (fuzz/run.sh; part of make test)
#   make bench       criterion benches (hot paths, skip list at 1M)
#   make image       the podium:latest image (docker/), its base made locally if it cannot be pulled
#   make compose-test  the docker-compose scenarios (tests/compose/) with podium:latest and
#                    Debian's redis-server packaged the same way; needs Docker (fails without it)

CARGO ?= cargo
PORT ?= 6379
SUITE = tests/redis-suite/run.sh
SUITE_PORT ?= 21111
PODIUM = target/release/podium

# Redis's Tcl suites in external mode (a fresh Podium per suite). FULL_SUITES pass in full;
# RATCHETS (suite:min-passed) are still being completed (what each lacks: README, "Redis's own test suites").
# Suites that pass in full natively run only there (native mode runs every external test too);
# unit/type/set stays here: natively its one more test reads Redis's dict rehashing state
# (DEBUG HTSTATS-KEY), which Podium's tables do not have (98/99 natively).
FULL_SUITES = unit/type/set
RATCHETS =
# The same suites' external tests against a server with one worker thread (`--threads 1`,
# what a process confined to one core gets): that scheduler hands a long script off and
# writes replies together before the worker sleeps (src/util/write_turn.rs), a path the
# native runs above (one worker per core: two here) do not take.
ONE_WORKER_SUITES = unit/type/set unit/multi unit/scripting unit/functions unit/type/list unit/pubsub unit/introspection
# Suites in the suites' native mode (they start Podium themselves): NATIVE_FULL pass in full,
# NATIVE_SUITES are suite:min-passed.
NATIVE_FULL = unit/lazyfree unit/memefficiency unit/type/zset unit/type/string unit/type/hash unit/sort unit/scan unit/type/incr unit/protocol unit/info-command unit/quit unit/keyspace unit/tracking unit/acl unit/acl-v2 unit/dump unit/slowlog unit/latency-monitor integration/rdb unit/aofrw unit/geo unit/bitops unit/hyperloglog unit/type/stream unit/info unit/introspection-2 unit/auth unit/pubsubshard unit/networking unit/oom-score-adj unit/wait integration/replication-2 integration/block-repl integration/redis-benchmark unit/bitfield integration/aof unit/introspection unit/scripting unit/functions unit/limits unit/querybuf unit/shutdown unit/pause integration/redis-cli unit/pubsub unit/type/stream-cgroups integration/aof-multi-part unit/multi unit/type/list unit/type/list-2 unit/type/list-3 unit/expire integration/replication-3 integration/logging unit/obuf-limits integration/replication-4 unit/maxmemory integration/shutdown integration/failover integration/convert-zipmap-hash-on-load integration/convert-ziplist-hash-on-load integration/convert-ziplist-zset-on-load integration/psync2-master-restart unit/client-eviction unit/replybufsize unit/pendingquerybuf integration/psync2 integration/psync2-pingoff integration/psync2-reg integration/replication-psync unit/cluster unit/cluster-scripting unit/cluster/misc unit/cluster/links unit/cluster/announced-endpoints integration/replication-buffer integration/dismiss-mem
NATIVE_SUITES = unit/other:25 integration/corrupt-dump:58
# A suite too long to run whole within CI's budget: make test runs it without its longest
# test (run.sh --skip); `make suites-long` runs it whole. integration/replication passes 59
# of 59 (240 s here, 109 of them in "diskless loading short read").
REPLICATION_SKIP = --skip 'diskless loading short read'
# Over TLS (`--tls`: tls-port, tls-replication, tcl-tls clients), a fixed set in make test: the
# TLS suite itself, the leaderboard's data types, transactions, scripting, pub/sub and
# tracking, ACL and AUTH, replication, and cluster nodes whose bus is TLS (tls-cluster);
# `make tls-suites` runs all of NATIVE_FULL so but TLS_NOT_SUITES: unit/cluster is all
# `tls:skip`, and unit/cluster/announced-endpoints reads `port` for the announced port, which
# is 0 in the suite's TLS mode (redis-server 7.0.15 fails both of its tests there too).
TLS_SUITES = unit/tls unit/type/zset unit/type/incr unit/type/hash unit/multi unit/scripting unit/pubsub unit/tracking unit/acl unit/auth unit/networking unit/info integration/replication-2 integration/block-repl unit/cluster-scripting unit/cluster/misc unit/cluster/links
TLS_NOT_SUITES = unit/cluster unit/cluster/announced-endpoints

# Redis's instance-based suites (tests/redis-suite/instances.sh): the Sentinel suite whole
# (Podium as the five data nodes), and a fixed subset of the cluster suite that fits CI's
# budget: the units below, which cover the bus, failover (automatic and CLUSTER FAILOVER),
# transactions and scripts on replicas, diskless swapdb loading, loading replicas, sharded
# Pub/Sub across slot moves and endpoints. `make cluster-suite` runs every unit (586 passed,
# 0 failed in 11.5 minutes, 2026-11-30).
CLUSTER_UNITS = 00-base 02-failover 10-manual-failover 16-transactions-on-replica 17-diskless-load-swapdb 22-replica-in-sync 25-pubsubshard-slot-migration 27-endpoints
# The same suite with every node's bus, replication and clients on TLS (instances.sh --tls:
# tls-cluster yes, a plaintext port beside): in make test the units that form the cluster,
# fail over and check CLUSTER SHARDS' tls-port; `make cluster-suite-tls` runs every unit.
CLUSTER_TLS_UNITS = 00-base 02-failover 28-cluster-shards
INSTANCES = tests/redis-suite/instances.sh
# The Sentinel suite passes in full. Its one race (12-master-reboot, shared with Redis) is
# re-run by instances.sh; it was frequent while a request held during a load parked its
# worker thread (docs/testing.md, "Redis's instance suites"), and the gate was 140 until then.
SENTINEL_MIN_PASSED = 152

# Seconds each fuzz target runs in make test (fuzz/run.sh --seconds N for longer runs).
FUZZ_SECONDS ?= 40

.PHONY: build tested-build run test test-serial test-lanes unit-test cargo-test suites suites-long tls-suites instance-suites cluster-suite cluster-suite-tls fuzz bench clean image compose-test

build:
	$(CARGO) build --release

# The binary as cargo test builds it. Its dependencies' features include what the tests'
# own dependencies switch on (cargo unifies them for a build with tests), so after
# `cargo test --release` this is a no-op, where `cargo build --release` rebuilt the crate and
# a dozen dependencies (two minutes of make test). The code is the same either way.
# make test builds once, then its lanes' targets skip this (PODIUM_BUILT=1): cargo holds its
# build directory's lock for the whole of a `cargo test` run, so a second cargo in the other
# lane would wait for it.
tested-build:
ifndef PODIUM_BUILT
	$(CARGO) build --release --bins --tests
endif

run: build
	$(PODIUM) conf/podium.conf --port $(PORT)

# The tables generated from Redis 7.0.15's source first: a second, and a drift is plain at once.
unit-test:
	bash tools/check-generated.sh
	$(CARGO) test --release

# Under nice: in make test's lanes it shares the cores with the Tcl suites, whose timing
# matters more (it runs alone as fast either way).
cargo-test:
	nice -n 19 $(CARGO) test --release

suites: tested-build
	bash $(SUITE) --server '$(PODIUM) --port {port} --save ""' --port $(SUITE_PORT) $(FULL_SUITES)
	@set -e; for r in $(RATCHETS); do \
	  bash $(SUITE) --server '$(PODIUM) --port {port} --save ""' --port $(SUITE_PORT) --min-passed $${r#*:} $${r%%:*}; \
	done
	bash $(SUITE) --server '$(PODIUM) --port {port} --save "" --threads 1' --port $(SUITE_PORT) $(ONE_WORKER_SUITES)
	bash $(SUITE) --native $(PODIUM) --port $(SUITE_PORT) $(NATIVE_FULL)
	@set -e; for r in $(NATIVE_SUITES); do \
	  bash $(SUITE) --native $(PODIUM) --port $(SUITE_PORT) --min-passed $${r#*:} $${r%%:*}; \
	done
	bash $(SUITE) --native $(PODIUM) --port $(SUITE_PORT) $(REPLICATION_SKIP) integration/replication
	bash $(SUITE) --native $(PODIUM) --tls --port $(SUITE_PORT) $(TLS_SUITES)

# The suite make test runs in part, whole.
suites-long: tested-build
	bash $(SUITE) --native $(PODIUM) --port $(SUITE_PORT) integration/replication

tls-suites: tested-build
	bash $(SUITE) --native $(PODIUM) --tls --port $(SUITE_PORT) unit/tls $(filter-out $(TLS_NOT_SUITES),$(NATIVE_FULL))

instance-suites: tested-build
	bash $(INSTANCES) sentinel $(PODIUM) --min-passed $(SENTINEL_MIN_PASSED)
	bash $(INSTANCES) cluster $(PODIUM) $(addprefix --unit ,$(CLUSTER_UNITS))
	bash $(INSTANCES) cluster $(PODIUM) --tls $(addprefix --unit ,$(CLUSTER_TLS_UNITS))

cluster-suite: tested-build
	bash $(INSTANCES) cluster $(PODIUM)

cluster-suite-tls: tested-build
	bash $(INSTANCES) cluster $(PODIUM) --tls

fuzz:
	nice -n 19 bash fuzz/run.sh --seconds $(FUZZ_SECONDS)

image: build
	bash docker/build-images.sh --podium-only

# Builds every image it needs (base included) first; without Docker it fails, it never skips.
compose-test: tested-build
	bash tests/compose/run.sh

test: test-lanes

test-serial: unit-test suites instance-suites fuzz compose-test

# Two lanes side by side (tools/lanes.sh): Redis's Tcl suites in one; cargo test and fuzzing
# (both under nice 19, so that the suites' servers get a core when they want one), the
# instance suites and the compose scenarios in the other. Most of the Tcl suites' time is
# waiting, so the two lanes take about half of test-serial's time on 2 cores, which keeps CI
# within its 45 minutes (docs/testing.md, "CI's budget").
test-lanes: tested-build
	bash tools/check-generated.sh
	PODIUM_BUILT=1 bash tools/lanes.sh 'tcl: suites' 'checks: cargo-test instance-suites fuzz compose-test'

bench:
	$(CARGO) bench

clean:
	$(CARGO) clean
