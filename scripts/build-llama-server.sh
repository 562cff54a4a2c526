#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (parallel decoding slots) from the llama.cpp sources that ship inside the
# llama-cpp-python source distribution on PyPI, so no other download is needed. Used by bench/bench_serve.py
# to measure 2 and 4 slots; llama-cpp-python's own server decodes one request at a time.
#
#   scripts/build-llama-server.sh DEST_DIR [PIP]
#
# The binary is linked statically and built with the same portable x86 flags as the llamacpp extra (a native
# build crashes on CPUs with AMX). The version matches the installed llama-cpp-python when there is one.
set -euo pipefail
dest=${1:?usage: build-llama-server.sh DEST_DIR [PIP]}
pip=${2:-pip}
. "$(dirname "$0")/llama-cpp-spec.sh"
echo "downloading the $spec source distribution"
"$pip" download --quiet --no-deps --no-binary :all: "$spec" -d "$work"
tar xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$work/cmake.log" \
  || { tail -30 "$work/cmake.log"; exit 1; }
cmake --build "$work/build" --target llama-server -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
mkdir -p "$dest"
install -m 755 "$work/build/bin/llama-server" "$dest/llama-server"
"$dest/llama-server" --version 2>&1 | head -2
echo "installed $dest/llama-server"
