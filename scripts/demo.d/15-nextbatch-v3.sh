#!/usr/bin/env bash
# NextBatch_v3 (docs/nextbatch_v3.md): the same example with data.sampling_mode set to the
# Feistel order. v2's batches are arithmetic progressions inside one block; v3's are spread
# over the whole dataset. Everything else (resume, trace, replay, goldens) works unchanged.
set -euo pipefail
out=$1/nextbatch_v3
mkdir -p "$out"
v2=fixtures/example_manifest.json
v3=fixtures/example_manifest_v3.json

echo "--- v2: first 3 global batches (each a progression inside one 16-row block)"
$DLKIT sample $v2 -d example/train --steps 3
echo "--- v3: first 3 global batches of the same dataset and seed"
$DLKIT sample $v3 -d example/train --steps 3 --checkpoint-out "$out/after3.ckpt" \
  --trace "$out/first.trace"
echo "--- v3: resume on 2 ranks (rank 1 shown): continues at step 4"
$DLKIT sample $v3 -d example/train --resume "$out/after3.ckpt" --world-size 2 --rank 1 --steps 2
echo "--- v3: replay the trace"
$DLKIT replay "$out/first.trace" --manifest $v3
echo "--- v3 goldens (N = 10^6, 10^9, 2^40 + 7)"
golden=src/dlkit/nextbatch/goldens  # package data: `dlkit verify-golden` alone checks them all
$DLKIT verify-golden $golden/nextbatch_v3_n1e6.json $golden/nextbatch_v3_n1e9.json \
  $golden/nextbatch_v3_n2e40.json
