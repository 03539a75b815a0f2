#!/usr/bin/env bash
# Everything a lent GPU machine can check, in one call of the `device` tool, with logs under $OUT:
#   the GPU-marked tests (kernels, random programs, the models, CuPy inputs), bench/gpu.py against cuBLAS/CuPy,
#   and bench/models.py --target cuda against PyTorch on the same GPU.
# That machine has no network: egglog comes from wheels carried in .devwheels/ (`make devwheels` fills it here),
# and the package is laid out as the wheel has it by linking its subpackages into egraph_compiler/ (the copy of
# the tree there is thrown away). Each step has its own time limit; a step that fails or times out does not stop
# the others. Environment: QUICK=1 for small benchmark sizes, STEPS="setup tests gpu models" to pick steps,
# MODELS_ARGS for bench/models.py (default: the MLP, GPT-2, ResNet blocks and the 8-layer chain, with torch.compile).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/egc_gpu_session}
mkdir -p "$OUT"
PY=${PY:-python3}
STEPS=${STEPS:-setup tests gpu models}
QUICK=${QUICK:+--quick}

step() { # name limit_s command...
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "== $name: rc=$rc in $(($(date +%s) - t0)) s (limit $limit)" | tee -a "$OUT/summary.txt"
  tail -n "${TAIL:-12}" "$OUT/$name.log"
}

setup() {
  "$PY" -m pip install -q --no-index --no-deps .devwheels/*.whl || return 1
  for d in backends rules extract examples; do ln -sfn "../$d" "egraph_compiler/$d"; done
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version | tail -n 2
  "$PY" -c "import cupy, egglog, egraph_compiler, torch; print('cupy', cupy.__version__, 'torch', torch.__version__, \
'devices', cupy.cuda.runtime.getDeviceCount())"
  lscpu | grep -E "Model name|^CPU\(s\)"
}
export -f setup
export PY PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # bench/ scripts import the package from the tree

for s in $STEPS; do
  case $s in
    setup) step setup 120 bash -c setup ;;
    tests) step tests "${TESTS_LIMIT:-240}" "$PY" -m pytest -q -m gpu -n 8 -p no:cacheprovider \
      tests/test_cuda_backend.py tests/test_cuda_vectors.py tests/test_cuda_grid_split.py \
      tests/test_cuda_shared_reduce.py tests/test_cuda_random_programs.py tests/test_models.py ;;
    gpu) step gpu "${GPU_LIMIT:-150}" "$PY" bench/gpu.py $QUICK --json "$OUT/gpu.json" ;;
    models) step models "${MODELS_LIMIT:-240}" "$PY" bench/models.py $QUICK --target cuda ${MODELS_ARGS:---only mlp,gpt2,resnet,dense_chain_8} \
      --json "$OUT/models.json" ;;
  esac
done
