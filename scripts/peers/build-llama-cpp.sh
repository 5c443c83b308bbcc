#!/usr/bin/env bash
# Build llama.cpp (the copy vendored in the llama-cpp-python sdist) as a
# correctness and speed peer, into the git-ignored folder .peers/.
#
#   scripts/peers/build-llama-cpp.sh            # from anywhere inside the repo
#
# Result:
#   .peers/llama.cpp/                 sources (vendor/llama.cpp of the sdist)
#   .peers/llama.cpp/build/bin/       llama-bench, llama-cli, llama-server,
#                                     libllama.so, libggml*.so
#
# Idempotent: skips every step whose output already exists. Never commit .peers/.
# Env: JOBS (default 2), LLCPP_VERSION (default pinned below), LLCPP_SDIST_DIR
# (where to look for / put the downloaded sdist).
set -euo pipefail

LLCPP_VERSION="${LLCPP_VERSION:-0.3.36}"
JOBS="${JOBS:-2}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PEERS="$ROOT/.peers"
SRC="$PEERS/llama.cpp"
BUILD="$SRC/build"
SDIST_NAME="llama_cpp_python-${LLCPP_VERSION}.tar.gz"
mkdir -p "$PEERS"

done_marker() {
  [[ -x "$BUILD/bin/llama-bench" && -x "$BUILD/bin/llama-cli" && -x "$BUILD/bin/llama-server" \
     && -e "$BUILD/bin/libllama.so" ]]
}
if done_marker; then
  echo "llama.cpp already built in $BUILD"
  exit 0
fi

# 1. Find or download the sdist. `--no-binary llama-cpp-python` (not `:all:`)
#    keeps the build backend's own dependencies (cmake, ninja) as wheels;
#    `:all:` makes pip bootstrap cmake from source just to read metadata.
sdist=""
for d in "${LLCPP_SDIST_DIR:-}" "$PEERS/dl"; do
  if [[ -n "$d" && -f "$d/$SDIST_NAME" ]]; then sdist="$d/$SDIST_NAME"; break; fi
done
if [[ -z "$sdist" ]]; then
  mkdir -p "$PEERS/dl"
  python3 -m pip download --no-deps --no-binary llama-cpp-python \
    -d "$PEERS/dl" "llama-cpp-python==${LLCPP_VERSION}"
  sdist="$PEERS/dl/$SDIST_NAME"
fi
echo "sdist: $sdist"

# 2. Unpack vendor/llama.cpp only.
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
  tmp="$(mktemp -d "$PEERS/unpack.XXXXXX")"
  tar -xzf "$sdist" -C "$tmp" "llama_cpp_python-${LLCPP_VERSION}/vendor/llama.cpp"
  rm -rf "$SRC"
  mv "$tmp/llama_cpp_python-${LLCPP_VERSION}/vendor/llama.cpp" "$SRC"
  rm -rf "$tmp"
  echo "llama-cpp-python ${LLCPP_VERSION}" > "$SRC/INFERD_PEER_VERSION"
fi

# 3. cmake from PyPI if the system has none.
if ! command -v cmake >/dev/null 2>&1; then
  python3 -m pip install -q cmake
  hash -r
fi
cmake --version | head -1

# 4. Configure and build (CPU only, no network: no curl, no prebuilt web UI). The CPU may
# report AMX while the kernel does not let a process use its tiles (this machine: ggml's
# AMX matmul dies on `ldtilecfg` with SIGILL), so -march=native goes without AMX.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S "$SRC" -B "$BUILD" \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON \
  -DGGML_NATIVE=ON \
  -DCMAKE_C_FLAGS="$no_amx" \
  -DCMAKE_CXX_FLAGS="$no_amx" \
  -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF
cmake --build "$BUILD" -j "$JOBS" --target llama llama-bench llama-cli llama-server

done_marker || { echo "build finished but expected binaries are missing in $BUILD/bin" >&2; exit 1; }
echo "llama.cpp built: $BUILD/bin"
ls "$BUILD/bin"
