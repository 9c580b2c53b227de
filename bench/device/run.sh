#!/bin/bash
# The real-GPU check (BENCHMARKS.md, "A real H200"), from the repo root on a GPU machine
# (every script only reads the GPUs: none changes MIG mode, creates instances or resets a GPU):
#   OUT=/tmp/out bash bench/device/run.sh
# .whl/ (optional): wheels of what that machine lacks, installed into /tmp/site.
set -x
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
exec > >(tee -a "$OUT/run.log") 2>&1
PY=${PY:-python3}
date -u
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || echo "WHEELS FAILED"
fi
export PYTHONPATH=$PWD/src:/tmp/site
timeout 30 nvidia-smi
timeout 30 nvidia-smi -q -d CLOCK,PERFORMANCE,ECC,POWER,TEMPERATURE | head -150 > "$OUT/nvidia-smi-q.txt"
timeout 30 $PY -c 'import pynvml, sys, torch; pynvml.nvmlInit(); print(sys.version, pynvml.nvmlSystemGetDriverVersion(), pynvml.nvmlSystemGetNVMLVersion(), torch.__version__, torch.version.cuda)'
timeout 30 $PY -m pip show nvidia-ml-py pydantic fastapi 2>/dev/null | grep -E "^(Name|Version|Location)"
timeout 60 $PY bench/device/nvml_probe.py
timeout 60 $PY bench/device/mig_probe.py   # MIG mode and devices, raw and as the backend offers them
timeout 150 $PY bench/device/cluster_probe.py
date -u
