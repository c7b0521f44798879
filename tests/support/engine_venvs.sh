#!/usr/bin/env bash
# Scratch venvs for tests/serve/test_engine_parsers.py: SGLang 0.5.23 and vLLM 0.33.0 without their GPU stacks (--no-deps,
# then only what their argument parsing imports, with the engines' own pins) over the CPU build of torch 2.13.0.
# The test itself runs in userturn's venv (PYTHON, default .venv/bin/python), which needs the test install (pytest):
# made there with `pip install -e '.[test]'` when pytest is missing.
# Usage: tests/support/engine_venvs.sh [DIR] [PYTHON]   (DIR default /tmp: DIR/enginevenv-sglang, DIR/enginevenv-vllm; ~3 GB
#        each; 25-40 minutes from PyPI on 2 cores shared with other builds)
# Then:  USERTURN_SGLANG_PYTHON=DIR/enginevenv-sglang/bin/python USERTURN_VLLM_PYTHON=DIR/enginevenv-vllm/bin/python \
#        .venv/bin/python -m pytest -q tests/serve/test_engine_parsers.py
set -euo pipefail
dir=${1:-/tmp}
root=$(cd "$(dirname "$0")/../.." && pwd)
userturn_python=${2:-$root/.venv/bin/python}
if ! "$userturn_python" -c "import pytest, userturn" 2>/dev/null; then
    "$userturn_python" -m pip install -q -e "$root[test]"
fi
cpu_torch=$(mktemp)
trap 'rm -f "$cpu_torch"' EXIT
echo "torch==2.13.0" >"$cpu_torch"  # keeps the CPU torch: nothing may pull a CUDA build in
pip_in() { "$1/bin/pip" install -q -c "$cpu_torch" "${@:2}"; }

python3 -m venv "$dir/enginevenv-sglang"
pip_in "$dir/enginevenv-sglang" --no-deps sglang==0.5.23
pip_in "$dir/enginevenv-sglang" torch==2.13.0 transformers==5.19.0 apache-tvm-ffi==0.1.11 "pyzmq>=25.1.2" numpy \
    orjson psutil pybase64 requests packaging pillow msgspec pydantic tqdm IPython aiohttp starlette dill triton

python3 -m venv "$dir/enginevenv-vllm"
pip_in "$dir/enginevenv-vllm" --no-deps vllm==0.33.0
pip_in "$dir/enginevenv-vllm" torch==2.13.0 "transformers>=5.16.1,<5.21.0" xgrammar==0.2.8 apache-tvm-ffi==0.1.11 \
    "llguidance>=1.7.0,<1.8.0" "fastapi>=0.133.0,<0.137.0" packaging pydantic regex numpy cbor2 psutil pyzmq requests \
    aiohttp "oss-harmony>=0.0.11" openai msgspec cloudpickle pillow pybase64 cachetools uvloop py-cpuinfo \
    prometheus_client partial-json-parser watchfiles uvicorn "orjson>=3.11.6"
echo "ready: $dir/enginevenv-sglang/bin/python $dir/enginevenv-vllm/bin/python"
