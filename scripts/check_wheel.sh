#!/usr/bin/env bash
# Check a built wheel the way a user gets it: install it in a fresh virtual environment on
# the oldest and the newest Python the package supports (3.10, 3.13), with no Rust
# toolchain on PATH and an empty TMPDIR of its own, then run the main job and the parity and
# version tests against that install (never against python/ of the checkout).
#
#   scripts/check_wheel.sh dist/kimi_k3_rs-0.1.0-cp310-abi3-manylinux_2_28_x86_64.whl
#
# The interpreters are found under `pyenv root` (versions/3.10.*, versions/3.13.*, newest
# patch release), else as python3.10 / python3.13 on PATH; KIMI_CHECK_PYTHONS="/path/a
# /path/b" names them instead. A missing one is an error, not a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

[[ $# -eq 1 && -f "$1" && "$1" == *.whl ]] || {
    echo "usage: $0 WHEEL (a .whl file)" >&2
    exit 2
}
wheel="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"

find_python() { # $1: X.Y
    local root candidates=()
    if root="$(pyenv root 2>/dev/null)"; then
        # newest patch release first (sort -V), e.g. versions/3.10.13 before versions/3.10.9
        mapfile -t candidates < <(find "$root/versions" -mindepth 1 -maxdepth 1 -name "$1.*" 2>/dev/null | sort -rV)
        for dir in "${candidates[@]}"; do
            [[ -x "$dir/bin/python$1" ]] && { echo "$dir/bin/python$1"; return; }
        done
    fi
    # pyenv's shim answers `command -v` even for a version it will refuse to run
    command -v "python$1" >/dev/null && "python$1" -c "" 2>/dev/null && { command -v "python$1"; return; }
    return 1
}
pythons=()
if [[ -n "${KIMI_CHECK_PYTHONS:-}" ]]; then
    read -r -a pythons <<<"$KIMI_CHECK_PYTHONS"
else
    for v in 3.10 3.13; do
        py="$(find_python "$v")" || {
            echo "check_wheel: no Python $v found (pyenv root's versions/$v.*, python$v on PATH); set KIMI_CHECK_PYTHONS" >&2
            exit 1
        }
        pythons+=("$py")
    done
fi

# PATH without any folder that holds a Rust tool, so nothing can quietly build from source.
clean_path=""
IFS=: read -r -a dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
    [[ -n "$dir" && ! -e "$dir/cargo" && ! -e "$dir/rustc" && ! -e "$dir/rustup" ]] || continue
    clean_path="${clean_path:+$clean_path:}$dir"
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# A pytest plugin, loaded with -p from the working folder: after collection (the tests have
# imported the package by then) it fails the run unless kimi_k3_rs came from the venv.
cat >"$work/installed_package_check.py" <<'EOF'
import sys
from pathlib import Path


def pytest_collection_finish(session):
    module = sys.modules.get("kimi_k3_rs")
    assert module is not None, "the tests did not import kimi_k3_rs"
    where = Path(module.__file__).resolve()
    assert Path(sys.prefix).resolve() in where.parents, f"kimi_k3_rs imported from {where}, not the venv"
EOF

# Every Python is tried (a failure on one does not hide the result on the other); the
# script fails at the end if any did.
failed=()
for py in "${pythons[@]}"; do
    version="$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
    echo "== $(basename "$wheel") on Python $version ($py)"
    start=$SECONDS
    venv="$work/venv-$version"
    "$py" -m venv "$venv"
    set +e
    (
        set -e
        export PATH="$venv/bin:$clean_path" TMPDIR="$work/tmp-$version" MALLOC_PERTURB_=165
        unset CARGO RUSTC RUSTUP_TOOLCHAIN CARGO_TARGET_DIR PYTHONPATH VIRTUAL_ENV
        mkdir "$TMPDIR"
        cd "$work"
        for tool in cargo rustc rustup; do
            if command -v "$tool" >/dev/null; then
                echo "check_wheel: $tool is still on PATH ($(command -v "$tool"))" >&2
                exit 1
            fi
        done
        # binaries only: a dependency without a wheel for this Python fails instead of building
        python -m pip install --disable-pip-version-check -q --only-binary :all: \
            "$wheel" "pytest>=8" "hypothesis>=6" "pytest-timeout>=2"
        python - <<'EOF'
import sys
from pathlib import Path

import numpy
import PIL

import kimi_k3_rs
from kimi_k3_rs import _native

prefix = Path(sys.prefix).resolve()
for module in (kimi_k3_rs, _native):
    where = Path(module.__file__).resolve()
    assert prefix in where.parents, f"{module.__name__} imported from {where}, not the venv"
print(f"kimi_k3_rs {kimi_k3_rs.__version__} from {Path(_native.__file__).resolve()}")
print(f"numpy {numpy.__version__}, Pillow {PIL.__version__}, simd_path {kimi_k3_rs.simd_path}")
EOF
        python -m kimi_k3_rs preprocess
        # The tests from the checkout, the package from the venv: the working folder (not the
        # checkout) is the current one, and the checkout's pytest settings apply.
        python -m pytest -p no:cacheprovider -p installed_package_check -q \
            --rootdir "$repo" -c "$repo/pyproject.toml" \
            "$repo/tests/test_parity.py" "$repo/tests/test_version.py"
    )
    status=$?
    set -e
    if [[ $status -eq 0 ]]; then
        echo "Python $version: OK ($((SECONDS - start)) s)"
    else
        echo "Python $version: FAILED ($((SECONDS - start)) s)" >&2
        failed+=("$version")
    fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "check_wheel: $(basename "$wheel") failed on Python ${failed[*]}" >&2
    exit 1
fi
