#!/usr/bin/env bash
# Every CUDA test and the GPU benchmark in one call on a GPU machine (budget: 8 minutes on one H200).
#
#   on a machine with a package index, once:  benchmarks/gpu/wheels.sh      (fills the git-ignored .whl/)
#   on the GPU machine, from the repo root:   bash benchmarks/gpu/check.sh  (.whl/ sent along)
#
# It installs .whl/ with pip --no-index into $SITE (default /tmp/site), prints what the machine is, runs
# tests/test_cuda.py and tests/test_gpu_suspend.py, then benchmarks/bench_gpu.py (a 4 GiB model, medians of
# $REPEAT runs after a warm-up, default 1; a 10 GiB tensor for the peak host memory) and
# benchmarks/bench_gpu_suspend.py (a kernel holding 4 GiB more, suspend against shutdown). Logs and the
# benchmarks' JSON go to $OUT (default /tmp/gkews-gpu). Exit status: non-zero if any part failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gkews-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
started=$(date +%s)
if compgen -G ".whl/*.whl" >/dev/null; then
  SITE=${SITE:-/tmp/site}
  if python3 -m pip --version >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
      || { echo "installing .whl/ failed"; exit 2; }
  else  # a wheel is a zip file laid out for site-packages
    echo "no pip here: unpacking .whl/ into $SITE"
    python3 -c "import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]" "$SITE" .whl/*.whl \
      || { echo "unpacking .whl/ failed"; exit 2; }
  fi
  export PYTHONPATH=$PWD:$SITE
  # what `pip install` of this package would put in etc/: the server extension enabled (tests/test_gpu_suspend.py
  # starts a real server; its JUPYTER_CONFIG_DIR is a temporary one, JUPYTER_CONFIG_PATH is searched as well)
  mkdir -p "$SITE/etc/jupyter/jupyter_server_config.d"
  cp jupyter-config/server-config/jupyter_gkews.json "$SITE/etc/jupyter/jupyter_server_config.d/"
  export JUPYTER_CONFIG_PATH=$SITE/etc/jupyter
  # and what it would put in $prefix/etc/ipython: kernels load kernel_state (the start hold of a kernel a resume
  # starts, the in-kernel API). The test servers set IPYTHONDIR to a temporary one, so only this path works.
  ipy=$(python3 -c "import os, sys; print(os.path.join(sys.prefix, 'etc', 'ipython'))")
  if [ ! -e "$ipy/ipython_kernel_config.json" ]; then
    mkdir -p "$ipy" && cp jupyter-config/ipython/ipython_kernel_config.json "$ipy/" \
      && echo "kernels load kernel_state: wrote $ipy/ipython_kernel_config.json"
  fi
else
  echo "no .whl/ here: tests that need the Jupyter packages will fail (make it with benchmarks/gpu/wheels.sh)"
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader || true
python3 -c "import sys, torch, safetensors; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'safetensors', safetensors.__version__, 'gpus', torch.cuda.device_count())"
df -h . /dev/shm | tail -n +2
free -g | head -2

# In order of what matters most, each part under its own limit so that one hang costs only its share:
# the GPU's own tests, the suspend test (a real server and kernel), the data-path benchmark, the suspend
# benchmark. The CPU stand-in's tests (tests/test_cuda_path_cpu.py) run in CI, not here.
part() {  # part NAME SECONDS COMMAND...: runs COMMAND, its output in $OUT/NAME.log, and records its exit status
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit} s; $(( $(date +%s) - started )) s so far)"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc"
  results+=("$name=$rc")
  [ "$rc" -eq 0 ] || failed=1
}
results=(); failed=0
pytest=(python3 -m pytest -q -rsP -p no:cacheprovider --durations=0)  # -rP: what passing tests print
part tests 150 "${pytest[@]}" --timeout 120 tests/test_cuda.py
part suspend-test 150 "${pytest[@]}" --timeout 140 tests/test_gpu_suspend.py
bench=(--repeat "${REPEAT:-1}")
python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" || { bench=(--smoke); echo "no GPU: --smoke"; }
part bench_gpu 200 python3 benchmarks/bench_gpu.py "${bench[@]}" --json "$OUT/bench_gpu.json"
suspend=(--gib 4 --cycles 1)
[ "${bench[0]}" = --smoke ] && suspend=(--smoke --cycles 1)
part bench_gpu_suspend 120 python3 benchmarks/bench_gpu_suspend.py "${suspend[@]}" --json "$OUT/bench_gpu_suspend.json"
echo "== ${results[*]}; $(( $(date +%s) - started )) s in all"
[ "$failed" -eq 0 ]
