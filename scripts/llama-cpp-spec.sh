# Sourced by the llama.cpp build scripts, after `pip` is set: `spec`, the llama-cpp-python requirement matching
# the installed version when there is one, and `work`, a scratch folder removed on exit.
python=$(dirname "$(command -v "$pip")")/python
version=$("$python" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null || true)
spec="llama-cpp-python${version:+==$version}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
