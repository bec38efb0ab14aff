#!/usr/bin/env bash
# `make test`'s two suites side by side: the newest redis-py (.venv) and the oldest supported
# one (.venv-oldest), each on a Redis of its own and a temp dir of its own. Most of a run is
# waiting on processes and timeouts (on 2 cores a suite uses about a quarter of one), so
# the two take little longer together than one alone. Each log is printed whole once its
# suite ends; the exit status fails when either does.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .test-logs
rm -rf .test-logs/tmp-newest .test-logs/tmp-oldest
newest=(.venv/bin/python -m pytest -q --durations=30 --basetemp=.test-logs/tmp-newest)
oldest=(.venv-oldest/bin/python -m pytest -q --durations=15 -p no:cacheprovider --basetemp=.test-logs/tmp-oldest)
for f in ${NEWEST_SKIP:-}; do newest+=("--ignore=$f"); done
for f in ${OLDEST_SKIP:-}; do oldest+=("--ignore=$f"); done

"${newest[@]}" > .test-logs/newest.log 2>&1 &
n=$!
"${oldest[@]}" > .test-logs/oldest.log 2>&1 &
o=$!
wait $n; rn=$?
echo "== the suite on the newest redis-py ($(.venv/bin/python -c 'import redis; print(redis.__version__)'))"
cat .test-logs/newest.log
wait $o; ro=$?
echo "== the suite on the oldest supported redis-py ($(.venv-oldest/bin/python -c 'import redis; print(redis.__version__)'))"
cat .test-logs/oldest.log
[ $rn -eq 0 ] && [ $ro -eq 0 ]
