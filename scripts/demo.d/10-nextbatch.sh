#!/usr/bin/env bash
# NextBatch_v2 on the bundled example manifest: sample, checkpoint, resume on another world
# size, trace + replay, and the golden checks.
set -euo pipefail
out=$1/nextbatch
mkdir -p "$out"
manifest=fixtures/example_manifest.json

echo "--- first 3 global batches of epoch 0 (world size 1)"
$DLKIT sample $manifest -d example/train --steps 3 --checkpoint-out "$out/after3.ckpt" \
  --trace "$out/first.trace"
echo "--- the same 3 steps as rank 1 of 2: its contiguous half of each global batch"
$DLKIT sample $manifest -d example/train --steps 3 --world-size 2 --rank 1
echo "--- resume from the checkpoint on 4 ranks (rank 0 shown): continues at step 4"
$DLKIT sample $manifest -d example/train --resume "$out/after3.ckpt" --world-size 4 --rank 0 --steps 2
echo "--- eval emits a partial last batch, never wrapped"
$DLKIT sample $manifest -d example/train --stage eval --start-index 64
echo "--- replay the trace"
$DLKIT replay "$out/first.trace" --manifest $manifest
echo "--- whole epoch to a .npy file"
$DLKIT sample $manifest -d example/train --format npy --out "$out/epoch0.npy"
echo "--- golden traces (N = 10^6 and 10^9)"
$DLKIT verify-golden
