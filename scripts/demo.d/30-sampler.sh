#!/usr/bin/env bash
# Relational sampling on the database 20-database.sh built in "$1/db": write the run manifest,
# sample seed indices, build batches, and show one sequence as a table.
set -euo pipefail
out=$1
db="$out/db"
DLKIT=${DLKIT:-dlkit}
PYTHON="$(dirname "$DLKIT")/python"

echo "--- dlkit manifest: one dataset per task and split; train order NextBatch_v3 (a shuffle)"
"$DLKIT" manifest "$db" --seed 42 --global-batch-size 16 --out "$out/run.json"

echo "--- dlkit sample: seed positions of the first two train steps of review_rating, rank 1 of 2"
"$DLKIT" sample "$out/run.json" -d example-shop/review_rating/train --rank 1 --world-size 2 --steps 2

echo "--- the same with --sampling-mode v2 (NextBatch_v2's block-affine order: evenly spaced)"
"$DLKIT" manifest "$db" --seed 42 --global-batch-size 16 --sampling-mode v2 \
  --out "$out/run_v2.json" --json >/dev/null
"$DLKIT" sample "$out/run_v2.json" -d example-shop/review_rating/train --rank 1 --world-size 2 --steps 2

echo "--- dlkit batches: two train batches of review_rating (B=8, S=1024) as .npz"
"$DLKIT" batches "$db" --task review_rating --split train --steps 2 --batch-size 8 --seed 42 \
  --out "$out/batches"
"$PYTHON" - "$out/batches/step_000000.npz" <<'PY'
import sys
import numpy as np
with np.load(sys.argv[1]) as batch:
    for key in batch.files:
        print(f"  {key:22s} {str(batch[key].dtype):8s} {batch[key].shape}")
PY

echo "--- dlkit show: the sequence of review 3 (its rating is the masked target)"
"$DLKIT" show "$db" --task review_rating --anchor 3 --sequence-length 96 --max-rows 12 --seed 42
