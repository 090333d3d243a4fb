# Sourced by scripts/*: make sure the virtual environment exists and holds this checkout with its
# dev extra. Re-installs only when pyproject.toml or the version (relay/__init__.py) changed since
# the last install, so repeated runs are quick and the installed metadata keeps the version.
#   PYTHON      the interpreter that creates it (default: python3)
#   RELAY_VENV  its directory, relative to the checkout (default: .venv), so that a second Python
#               gets its own, e.g. PYTHON=python3.13 RELAY_VENV=.venv-3.13 scripts/test
# Scripts run "$VENV/bin/...".
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
VENV="${RELAY_VENV:-.venv}"
export RELAY_VENV="$VENV"     # scripts started by the tests (scripts/bench, scripts/demo) use it too
if [ ! -x "$VENV/bin/python" ]; then
    echo "creating $VENV with $($PY --version 2>&1)" >&2
    "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.relay-installed"
WANT="$( (cat pyproject.toml; grep "^__version__" relay/__init__.py || true) | cksum)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    echo "installing relay and its dev extra into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2 || true
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[dev]' >&2
    echo "$WANT" > "$STAMP"
fi
