#!/usr/bin/env bash
# The Python packages a GPU machine without a package index lacks, as wheels in .whl/ (git-ignored).
# The machine has Python 3.12 with torch, numpy, safetensors, xxhash, pytest, pytest-timeout and cuda-bindings;
# the tests also need the Jupyter stack, dill, zstandard, pytest-jupyter and NVML's bindings (nvidia-ml-py).
# Run from the repository root, on any machine where pip reaches an index:
#   benchmarks/gpu/wheels.sh [EXTRA==VERSION ...]
# benchmarks/gpu/check.sh installs them there with pip --no-index into /tmp/site.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl && mkdir .whl
${PYTHON:-python3} -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl \
  "jupyter_server==2.21.1" "ipykernel==7.4.0" "jupyter_client==8.10.0" "dill==0.4.1" "pytest-jupyter==0.11.0" \
  "nvidia-ml-py" "zstandard==$(${PYTHON:-python3} -c 'import importlib.metadata as m; print(m.version("zstandard"))' 2>/dev/null || echo 0.25.0)" "$@"
# the machine's own copies of these stay in charge: two versions of one package break the install there
rm -f .whl/numpy-* .whl/torch-* .whl/pytest-[0-9]* .whl/pytest_timeout-* .whl/pluggy-* .whl/iniconfig-* .whl/packaging-*
echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl/"
