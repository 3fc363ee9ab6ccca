#!/usr/bin/env bash
# Record the GPU-only reproduction notebooks on a CUDA host, so that hosts without a GPU (CI,
# the site build) can show them with their provenance (status recorded-gpu).
#
#   recordings/record-gpu.sh [ID...]        (default: every entry with reproduction.device: gpu)
#
# Run from the repository root on the GPU machine. That machine has PyTorch with CUDA but no
# Jupyter packages and no network: carry wheels built for its Python version in ./wheels
# (on the dev host: pip download --python-version X.Y --only-binary=:all: -d wheels \
#   nbclient nbformat ipykernel nbconvert matplotlib psutil pyyaml jsonschema google-re2).
# Afterwards commit recordings/<id>.ipynb and recordings/<id>/ (executed notebook with
# metadata.trainwreck.provenance, and its evidence).
set -euo pipefail
cd "$(dirname "$0")/.."

python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device here')"
if ! python -c "import nbclient, nbformat, ipykernel, matplotlib, psutil" 2>/dev/null; then
  python -m pip install -q --no-index --find-links "${WHEELS:-wheels}" \
    nbclient nbformat ipykernel nbconvert matplotlib psutil pyyaml jsonschema google-re2
fi
python -m pip install -q --no-deps --no-build-isolation -e . 2>/dev/null \
  || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
python -m ipykernel install --user --name python3 >/dev/null 2>&1 || true

if [ "$#" -eq 0 ]; then
  mapfile -t ids < <(python - <<'PY'
from pathlib import Path
from trainwreck.reproduce import discover
print("\n".join(t.id for t in discover(Path(".")) if t.device == "gpu"))
PY
)
else
  ids=("$@")
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python -m trainwreck reproduce --force --record --cell-timeout 480 --timeout 540 "${ids[@]}"
ls -la recordings/
