#!/usr/bin/env bash
# Build llama-cpp-python with its CPU kernels chosen at run time (GGML_BACKEND_DL with GGML_CPU_ALL_VARIANTS: one
# kernel module per x86 level, from plain x86-64 to AVX-512 and AMX, of which ggml loads the best the processor
# runs) and install it into a folder of its own, beside the portable build the llamacpp extra installs. quco
# loads its modules itself (quco.llm.llamacpp_backends). bench/bench_eval_speed.py's `variants` mode compares
# the two builds on whole questions:
#
#   scripts/build-llama-variants.sh DEST_DIR [PIP]
#   python bench/bench_eval_speed.py --modes threads2,variants --llama-cpp-dir DEST_DIR
#
# Using it instead of the portable build: PYTHONPATH=DEST_DIR. The version matches the installed
# llama-cpp-python when there is one. About 10 minutes of compiling on 2 idle cores (14 CPU variants).
set -euo pipefail
dest=${1:?usage: build-llama-variants.sh DEST_DIR [PIP]}
pip=${2:-pip}
. "$(dirname "$0")/llama-cpp-spec.sh"
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
echo "building $spec with $CMAKE_ARGS"
"$pip" wheel --quiet --no-deps --no-binary llama-cpp-python --no-cache-dir -w "$work" "$spec"
rm -rf "$dest"
"$pip" install --quiet --no-deps --target "$dest" "$work"/llama_cpp_python-*.whl
echo "CPU kernel modules: $(find "$dest" -name '*ggml-cpu-*' -printf '%f ')"
echo "installed into $dest"
