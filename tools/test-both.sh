#!/usr/bin/env bash
# `make test`'s two suites side by side: the newest redis-py (.venv) in $XDIST pytest-xdist
# workers, and the oldest supported one (.venv-oldest) on $OLDEST_TESTS beside it (empty:
# the whole suite, in workers too, after the newest), each on Redis servers of its own and a
# temp dir of its own. $MARK selects the
# tiers ("not slow" in make test, "" = all in make test-all). Most of a run is waiting on
# processes and timeouts, so the two take little longer together than the newest alone.
# Each log is printed whole once its suite ends, with its 15 slowest tests; the exit
# status fails when either does.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .test-logs
rm -rf .test-logs/tmp-newest .test-logs/tmp-oldest
common=(-q -p no:cacheprovider --durations=15 -m "${MARK-not slow}")
newest=(.venv/bin/python -m pytest "${common[@]}" -n "${XDIST:-3}" --dist loadgroup
    --basetemp=.test-logs/tmp-newest)
oldest=(.venv-oldest/bin/python -m pytest "${common[@]}" --basetemp=.test-logs/tmp-oldest)
if [ -n "${OLDEST_TESTS:-}" ]; then
    # shellcheck disable=SC2206  # a list of test paths, split on spaces
    oldest+=(${OLDEST_TESTS})
else
    # the whole suite (make test-all): in workers too, once the newest's are done
    oldest+=(-n "${XDIST:-3}" --dist loadgroup)
fi

start=$(date +%s)
"${newest[@]}" > .test-logs/newest.log 2>&1 &
n=$!
rn=
if [ -z "${OLDEST_TESTS:-}" ]; then wait $n; rn=$?; fi
"${oldest[@]}" > .test-logs/oldest.log 2>&1 &
o=$!
wait $o; ro=$?
echo "== the oldest supported redis-py ($(.venv-oldest/bin/python -c 'import redis; print(redis.__version__)')): ${OLDEST_TESTS:-the whole suite}, $(($(date +%s) - start)) s"
cat .test-logs/oldest.log
[ -n "$rn" ] || { wait $n; rn=$?; }
echo "== the suite on the newest redis-py ($(.venv/bin/python -c 'import redis; print(redis.__version__)')), ${XDIST:-3} workers, $(($(date +%s) - start)) s"
cat .test-logs/newest.log
[ $rn -eq 0 ] && [ $ro -eq 0 ]
