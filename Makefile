# Targets that people and CI both use. `make demo` and `make test` set everything up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the oldest redis-py pyproject.toml allows: the suite runs on it too
OLDEST := .venv-oldest
OLDEST_REDIS := redis==5.2.*
OLDEST_STAMP := $(OLDEST)/.installed

.PHONY: fuzz setup setup-oldest demo test test-all test-newest test-oldest test-unit test-lua \
	test-integration test-cluster test-slow lint typecheck unit browser bench bench-baseline soak chaos \
	schedules-minute clean

setup: $(STAMP)

# the newest of every dependency pyproject.toml allows (redis-py included)
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --upgrade --upgrade-strategy eager -e '.[dev]'
	touch $(STAMP)

setup-oldest: $(OLDEST_STAMP)

$(OLDEST_STAMP): pyproject.toml
	test -x $(OLDEST)/bin/python || $(PY) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install -q --upgrade pip
	$(OLDEST)/bin/python -m pip install -q -e '.[test]' '$(OLDEST_REDIS)'
	touch $(OLDEST_STAMP)

# In a terminal the page stays up until Ctrl-C; elsewhere (CI) it ends by itself.
# make demo DEMO_ARGS="--speed 0.5 --gate-pause 1 --linger 0"  (see python -m examples.demo -h)
demo: setup
	$(BIN)/python -m examples.demo $(DEMO_ARGS)

lint: setup
	$(BIN)/ruff check rsjobs tests examples tools bench
	$(BIN)/ruff format --check rsjobs tests examples tools bench

typecheck: setup
	$(BIN)/mypy

# The tiers (tests/conftest.py marks them; README "Testing" says what runs where):
# unit (no Redis), lua (the scripts on fakeredis), integration (a real Redis), cluster (a
# local Redis Cluster) and slow (chaos, soak, fresh venv, make demo, browser pages but one).
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider
# pytest-xdist workers for the newest suite: its tests mostly wait on processes, so more
# workers than the 2 cores (cluster tests stay in one worker: --dist loadgroup)
XDIST ?= 3
# what the oldest supported redis-py runs: what speaks redis-py (the store: connection,
# pipelined lane, cluster client, scripts; the cluster tier's life cycle) and one end-to-end
# life cycle (enqueue, a worker runs it, SUCCEEDED) on a real Redis
OLDEST_TESTS := tests/store tests/cluster/test_lifecycle.py \
	tests/worker/test_worker.py::test_runs_a_task_with_progress_and_result
# the long budgets of make test-all (the suite's: 15 machine examples, 5 fuzz cases)
LONG := RSJOBS_PROPERTY_EXAMPLES=150 RSJOBS_FUZZ_EXAMPLES=30

# lint, types, every tier but slow on the newest redis-py (in XDIST workers; one short
# chaos run, one browser page, a short fuzz and property run are in it) and the oldest's
# subset beside it (tools/test-both.sh); CI runs this
test: setup setup-oldest lint typecheck browser
	XDIST=$(XDIST) MARK="not slow" OLDEST_TESTS="$(OLDEST_TESTS)" bash tools/test-both.sh

# everything at length: slow included, the long budgets, the whole suite on both redis-pys
test-all: setup setup-oldest lint typecheck browser
	# the whole suite on the oldest redis-py needs the dev extra there too
	$(OLDEST)/bin/python -m pip install -q -e '.[dev]' '$(OLDEST_REDIS)'
	$(LONG) XDIST=$(XDIST) MARK="" OLDEST_TESTS="" bash tools/test-both.sh

test-newest: setup
	$(PYTEST) -n $(XDIST) --dist loadgroup -m "not slow"

test-oldest: setup-oldest
	$(OLDEST)/bin/python -m pytest -q -p no:cacheprovider -m "not slow" $(OLDEST_TESTS)

test-unit: setup
	$(PYTEST) -n $(XDIST) -m "unit and not slow"

test-lua: setup
	$(PYTEST) -n $(XDIST) -m "lua and not slow"

test-integration: setup
	$(PYTEST) -n $(XDIST) --dist loadgroup -m "integration and not cluster and not slow"

test-cluster: setup
	$(PYTEST) -m "cluster and not slow"

# the slow tier, and the property machine and the HTTP fuzzing at their long budgets
test-slow: setup browser
	$(LONG) $(PYTEST) -n $(XDIST) --dist loadgroup -m slow
	$(LONG) $(PYTEST) -n $(XDIST) tests/store/test_fsm_properties.py::TestTaskMachine \
		tests/web/test_schemathesis.py

# Debian's chromium for the browser test (skipped with a message where it cannot be had)
browser:
	@bash tools/install-browser.sh

# Peers (taskiq, bullmq, saq, arq, streaq) in a separate venv, same Redis, same run
# quick mode: make bench BENCH_ARGS="--tasks 2000 --rounds 1" BENCH_SHARDS_ARGS="--tasks 5000"
bench:
	bash bench/setup.sh
	.venv-bench/bin/python -m bench.run $(BENCH_ARGS)
	# the cluster section: sharded namespaces (S = 1, 3, 6) on 3 masters
	.venv-bench/bin/python -m bench.shards $(BENCH_SHARDS_ARGS)

# The tree's rsjobs against rsjobs at a git revision, paired in every round; medians of the
# per-round ratios tree / baseline (bench/README.md, "Comparing revisions"). Peers only if
# asked for: make bench-baseline REV=193c165 BENCH_ARGS="--rounds 6 --systems rsjobs,bullmq"
bench-baseline:
	$(if $(REV),,$(error make bench-baseline needs REV=<git revision>))
	bash bench/setup.sh
	.venv-bench/bin/python -m bench.run --systems rsjobs --baseline $(REV) $(BENCH_ARGS)

# A million tasks through enqueue, processing and retention expiry (about 9 minutes);
# short mode: make soak SOAK_ARGS="--tasks 50000"
soak:
	bash bench/setup.sh
	.venv-bench/bin/python -m bench.soak $(SOAK_ARGS)

# A chaos run with total accounting (the suite runs a short one); replay with --seed
CHAOS_DURATION ?= 600
chaos: setup
	$(BIN)/python -m tools.chaos --duration $(CHAOS_DURATION) --tasks 6000 --report chaos-report.json $(CHAOS_ARGS)

# a schedule ticking every second for a full minute under three reapers, one SIGKILLed
# half-way: exactly one task per tick (the suite runs the same test for 14 s)
schedules-minute: setup
	RSJOBS_SCHEDULE_SECONDS=60 $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/reaper/test_schedules.py -k three_reapers

# the HTTP fuzzing with more cases per operation than the suite's 30 (about 25 minutes)
FUZZ_EXAMPLES ?= 100
fuzz: setup
	RSJOBS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/web/test_schemathesis.py

# the tiers without a real Redis (no Redis, and the scripts on fakeredis)
unit: setup
	$(PYTEST) -n $(XDIST) -m "(unit or lua) and not slow"

clean:
	rm -rf $(VENV) $(OLDEST) .test-logs .pytest_cache .mypy_cache .ruff_cache .hypothesis
