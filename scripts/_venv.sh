# Sourced by scripts/*: make sure the virtual environment exists and holds this checkout, editable.
# VENV_EXTRA, set on the `source` line, says what else it needs: `dev` (the default: the test
# suite, the benchmarks and the soaks need the test tools and the provider SDKs) or `none` (what
# scripts/demo runs: the package alone). One environment serves both: after scripts/demo,
# scripts/test adds the dev extra; after scripts/test, scripts/demo installs nothing.
# The versions come from the lock files (requirements/dev.lock, requirements/run.lock; scripts/lock
# refreshes them), so a fresh clone installs what last passed, on any day; the package itself is
# installed editable on top, without its dependencies and with the locked build requirements.
# RELAY_NEWEST=1 installs the newest releases pyproject.toml's ranges allow instead (no lock), for
# `scripts/test --newest`.
# Re-installs only when pyproject.toml, a lock or the version (relay/__init__.py) changed since the
# last install, so repeated runs are quick and the installed metadata keeps the version. Says what
# it does on stderr, one line per step (pip's whole output goes to $VENV/.pip.log).
#   PYTHON      the interpreter that creates it (default: python3)
#   RELAY_VENV  its directory, relative to the checkout (default: .venv), so that a second Python
#               gets its own, e.g. PYTHON=python3.13 RELAY_VENV=.venv-3.13 scripts/test
# Leaves the shell in the checkout; scripts run "$VENV/bin/..." ($VENV is absolute).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
export RELAY_VENV="${RELAY_VENV:-.venv}"  # scripts started by the tests (scripts/bench, scripts/demo) use it too
VENV="$ROOT/$RELAY_VENV"
EXTRA="${VENV_EXTRA:-dev}"

source "$ROOT/scripts/_pip.sh"

if [ ! -x "$VENV/bin/python" ]; then
    say "creating $RELAY_VENV with $($PY --version 2>&1)"
    "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.relay-installed"
NEWEST="${RELAY_NEWEST:-0}"
WANT="$( (cat pyproject.toml setup.py relay/transports/_picows_lane.pyx relay/dialects/_peek.pyx relay/dialects/_peek.pxd requirements/*.lock; grep "^__version__" relay/__init__.py || true; echo "newest=$NEWEST") | cksum)"
HAVE="$(cat "$STAMP" 2>/dev/null || true)"
# the stamp: the checksum, then the extra installed with it
if [ "$HAVE" != "$WANT dev" ] && [ "$HAVE" != "$WANT $EXTRA" ]; then
    if [ "$EXTRA" = dev ]; then
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2 || true
    fi
    if [ "$NEWEST" = 1 ]; then
        say "installing relay and its dev extra at the newest releases its ranges allow into $RELAY_VENV"
        pip_install --upgrade --upgrade-strategy eager -r requirements/build.in -e '.[dev]'
    else
        if [ "$EXTRA" = dev ]; then
            LOCK=requirements/dev.lock
            say "installing the locked test tools and provider SDKs ($LOCK) into $RELAY_VENV"
        else
            LOCK=requirements/run.lock
            say "installing relay's locked dependencies ($LOCK) into $RELAY_VENV (first run only)"
        fi
        pip_install -r "$LOCK"
        say "installing relay itself (editable: your changes apply)"
        pip_install --no-deps --no-build-isolation -e .
    fi
    echo "$WANT $EXTRA" > "$STAMP"
fi
