#!/usr/bin/env bash
# The project's two entry points; both set up what they need in .venv first.
#
#   scripts/dev.sh bench [ARGS]   the main job: the embedded store under the
#                                 reference load of 18,000 events/s, with a summary
#   scripts/dev.sh test  [ARGS]   lint, types, stub check, C unit tests, pytest
#                                 (ARGS go to pytest, e.g. -m 'not slow')
#   scripts/dev.sh asv   [ARGS]   asv with the bench extra, e.g. 'run --python=same'
#                                 (benches/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

setup() {
    if [ ! -x "$VENV/bin/python" ]; then
        if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
            rm -rf "$VENV"
            # Debian ships venv's pip bootstrap separately.
            if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
                apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
                "$PYTHON" -m venv "$VENV"
            else
                echo "dev.sh: '$PYTHON -m venv' failed; install python3-venv (Debian) and retry" >&2
                exit 1
            fi
        fi
    fi
    # pyproject.toml's build requirements ([build-system]) and runtime
    # dependencies, before the build: a profile-guided build runs the
    # package (scripts/pgo_train.py).
    "$VENV/bin/python" -c 'import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))
print("\n".join(p["build-system"]["requires"] + p["project"]["dependencies"]))' >"$VENV/dev-requirements.txt"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$VENV/dev-requirements.txt"
    # No build isolation: the build tools above are already in the venv, so a
    # rebuild costs a compile, not a fresh download of setuptools and Cython.
    # Profile-guided (setup.py's BuildExt, docs/build.md) unless
    # DEDUPSTORE_PGO=0: the first build, and one after the C changed, trains
    # an instrumented build for about 15 s; an unchanged one is reused.
    DEDUPSTORE_PGO=${DEDUPSTORE_PGO:-1} \
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation "$1"
}

cmd=${1:-}
shift || true
case "$cmd" in
    bench)
        setup '.[plot]'
        picture=(--histogram bench-results/latency.png)
        for arg in "$@"; do
            # A ramp runs many short stores: there is no one run to draw.
            if [ "$arg" = --find-max ]; then picture=(); fi
        done
        # The console script, not `python -m`: from the checkout, -m would import
        # the source tree (which has no compiled _native) instead of the install.
        exec "$VENV/bin/dedupstore" bench --rate 18000 --duration 30s "${picture[@]}" "$@"
        ;;
    asv)
        setup '.[bench]'
        # asv asks about the machine once; --yes takes the defaults it detects.
        [ -f "$HOME/.asv-machine.json" ] || "$VENV/bin/asv" machine --yes >/dev/null
        exec "$VENV/bin/asv" "$@"
        ;;
    test)
        setup '.[test]'
        "$VENV/bin/ruff" check .
        # The wire modules mypy reads in the source tree (not committed).
        "$VENV/bin/python" scripts/genproto.py >/dev/null
        "$VENV/bin/mypy"
        # From tests/, so the installed package (with its compiled _native), not
        # the source tree, is what gets imported and checked.
        cd tests
        "../$VENV/bin/python" -m mypy.stubtest dedupstore._native
        exec "../$VENV/bin/python" -m pytest -c ../pyproject.toml --rootdir .. "$@"
        ;;
    *)
        echo "usage: scripts/dev.sh {bench|test|asv} [ARGS]" >&2
        exit 2
        ;;
esac
