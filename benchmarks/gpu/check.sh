#!/usr/bin/env bash
# Every CUDA test and the GPU benchmark in one call on a GPU machine (budget: 8 minutes on one H200).
#
#   on a machine with a package index, once:  benchmarks/gpu/wheels.sh      (fills the git-ignored .whl/)
#   on the GPU machine, from the repo root:   bash benchmarks/gpu/check.sh  (.whl/ sent along)
#
# It installs .whl/ with pip --no-index into $SITE (default /tmp/site), prints what the machine is, runs
# tests/test_cuda*.py and tests/test_gpu_*.py, then benchmarks/bench_gpu.py (a 4 GiB model, a 10 GiB
# tensor for the peak host memory). Logs and the benchmark's JSON go to $OUT (default /tmp/gkews-gpu);
# the benchmark's table is printed last. Exit status: non-zero if the tests or the benchmark failed.
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
else
  echo "no .whl/ here: tests that need the Jupyter packages will fail (make it with benchmarks/gpu/wheels.sh)"
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader || true
python3 -c "import sys, torch, safetensors; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'safetensors', safetensors.__version__, 'gpus', torch.cuda.device_count())"
df -h . /dev/shm | tail -n +2
free -g | head -2

# the GPU's own tests first; the CPU stand-in's (already run in CI) last, so that a timeout costs least
tests="tests/test_cuda.py tests/test_gpu_suspend.py tests/test_cuda_path_cpu.py"
echo "== tests: $tests"
timeout 230 python3 -m pytest -q -rs -p no:cacheprovider --timeout 200 --durations=0 $tests 2>&1 | tee "$OUT/tests.log"
rc_tests=${PIPESTATUS[0]}
echo "== benchmark (tests took $(( $(date +%s) - started )) s)"
bench=()
python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" || { bench=(--smoke); echo "no GPU: --smoke"; }
timeout 250 python3 benchmarks/bench_gpu.py "${bench[@]}" --json "$OUT/bench_gpu.json" 2>&1 | tee "$OUT/bench_gpu.log"
rc_bench=${PIPESTATUS[0]}
echo "== tests: exit $rc_tests; benchmark: exit $rc_bench; $(( $(date +%s) - started )) s in all"
[ "$rc_tests" -eq 0 ] && [ "$rc_bench" -eq 0 ]
