# Sourced by scripts/*: make sure .venv exists and holds this checkout with its dev extra.
# Re-installs only when pyproject.toml changed since the last install, so repeated runs are quick.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "creating .venv with $($PY --version 2>&1)" >&2
    "$PY" -m venv .venv
fi
STAMP=.venv/.relay-installed
WANT="$(cat pyproject.toml | cksum)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    echo "installing relay and its dev extra into .venv" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >&2 || true
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]' >&2
    echo "$WANT" > "$STAMP"
fi
