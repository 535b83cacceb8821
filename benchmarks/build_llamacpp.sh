#!/usr/bin/env bash
# Build llama-cpp-python from its pinned PyPI sdist into a wheel cached under $RADIXLM_CACHE, then install it.
#
# The wheel is built once (20-40 minutes on 2 cores) and reused: a later run finds it in
# $RADIXLM_CACHE/wheels and only installs it. CPU build: AVX2/FMA/F16C, OpenMP, no GPU backend, not
# -march=native, so the cached wheel runs on any x86-64 machine with AVX2.
#
#   benchmarks/build_llamacpp.sh            # build if needed, install into the active Python
#   benchmarks/build_llamacpp.sh --no-install
#   LLAMACPP_CMAKE_ARGS="-DGGML_NATIVE=ON" benchmarks/build_llamacpp.sh   # other flags (new wheel dir)
set -euo pipefail

VERSION="${LLAMACPP_VERSION:-0.3.36}"   # same pin as radixlm.runtime.testing.llamacpp_fixtures
CACHE="${RADIXLM_CACHE:-$HOME/.cache/radixlm}"
PYTHON="${PYTHON:-python3}"
DEFAULT_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_OPENMP=ON -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF \
-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF"
ARGS="${LLAMACPP_CMAKE_ARGS:-$DEFAULT_ARGS}"
# Different flags give a different wheel: key the folder by a hash of them.
KEY="$(printf '%s' "$ARGS" | sha256sum | cut -c1-8)"
WHEELS="$CACHE/wheels/llama-cpp-python-$VERSION-$KEY"
INSTALL=1
[[ "${1:-}" == "--no-install" ]] && INSTALL=0

wheel() { ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -n1; }

if [[ -z "$(wheel)" ]]; then
    mkdir -p "$WHEELS"
    SDIST_DIR="$CACHE/sdist"
    mkdir -p "$SDIST_DIR"
    SDIST="$(ls "$SDIST_DIR"/llama_cpp_python-"$VERSION".tar.gz 2>/dev/null || true)"
    if [[ -z "$SDIST" ]]; then
        "$PYTHON" -m pip download --no-deps --no-binary :all: --disable-pip-version-check \
            "llama-cpp-python==$VERSION" -d "$SDIST_DIR"
        SDIST="$SDIST_DIR/llama_cpp_python-$VERSION.tar.gz"
    fi
    echo "building $SDIST with CMAKE_ARGS=$ARGS" >&2
    # Build into a temporary folder and move the wheel in last, so a killed build leaves no wheel behind.
    TMP="$(mktemp -d "$WHEELS/.build.XXXXXX")"
    trap 'rm -rf "$TMP"' EXIT
    CMAKE_ARGS="$ARGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
        nice -n 19 "$PYTHON" -m pip wheel --no-deps --disable-pip-version-check -w "$TMP" "$SDIST"
    mv "$TMP"/llama_cpp_python-*.whl "$WHEELS"/
    printf '%s\n' "$ARGS" > "$WHEELS/CMAKE_ARGS"
fi

echo "wheel: $(wheel)"
if [[ "$INSTALL" == 1 ]]; then
    # --no-deps keeps the venv's numpy; llama-cpp-python's other deps (jinja2, diskcache, typing-extensions)
    # are installed only when missing.
    "$PYTHON" -m pip install --disable-pip-version-check --no-deps "$(wheel)"
    "$PYTHON" -m pip install --disable-pip-version-check "diskcache>=5.6.1" "jinja2>=2.11.3" "typing-extensions>=4.5.0"
fi
