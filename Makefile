# Targets that people and CI both use. `make demo` and `make test` set everything up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the oldest redis-py pyproject.toml allows: the suite runs on it too
OLDEST := .venv-oldest
OLDEST_REDIS := redis==5.2.*
OLDEST_STAMP := $(OLDEST)/.installed

.PHONY: fuzz setup setup-oldest demo test test-newest test-oldest lint typecheck unit browser bench soak chaos schedules-minute clean

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
	$(OLDEST)/bin/python -m pip install -q -e '.[dev]' '$(OLDEST_REDIS)'
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

# both suites at once (tools/test-both.sh says why); test-newest / test-oldest run one
test: setup setup-oldest lint typecheck browser
	NEWEST_SKIP="$(NEWEST_SKIP)" OLDEST_SKIP="$(OLDEST_SKIP)" bash tools/test-both.sh

# What does not depend on redis-py's version runs once, in one of the two suites: the
# browser pages in the newest, the HTTP fuzzing (schemathesis) and the packaging and demo
# tests (fresh venv, make demo) in the oldest, whose suite is otherwise the shorter.
ONCE_NEWEST := tests/web/test_browser.py tests/web/test_workflow_browser.py \
	tests/web/test_dashboard_browser.py
ONCE_OLDEST := tests/web/test_schemathesis.py tests/examples/test_fresh_venv.py \
	tests/examples/test_make_demo.py
NEWEST_SKIP := $(ONCE_OLDEST)
OLDEST_SKIP := $(ONCE_NEWEST)

test-newest: setup
	$(BIN)/python -m pytest -q $(addprefix --ignore=,$(NEWEST_SKIP))

test-oldest: setup-oldest
	$(OLDEST)/bin/python -m pytest -q -p no:cacheprovider $(addprefix --ignore=,$(OLDEST_SKIP))

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
	$(BIN)/python -m pytest -q -m "not integration"

clean:
	rm -rf $(VENV) $(OLDEST) .test-logs .pytest_cache .mypy_cache .ruff_cache .hypothesis
