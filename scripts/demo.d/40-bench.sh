#!/usr/bin/env bash
# The prefetch engine: record a `dlkit sample` trace, replay its order in `dlkit bench` (rows
# gathered from a memory-mapped file by producer threads), then a synthetic CPU-bound run.
# Each bench run also times the no-prefetch sequential loop and prints the speedup.
set -euo pipefail
out=$1
DLKIT=${DLKIT:-dlkit}

cat > "$out/bench-run.json" <<'JSON'
{
  "seed": 5,
  "global_batch_size": 512,
  "data": {"sampler_block_size": 4096, "drop_last": false},
  "datasets": {
    "bench/train": {"id": "bench", "version": "1", "cardinality": 100000,
                    "hash": "0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a69788796a5b4c3d2e1f0a1b2c3d4e5f6"}
  }
}
JSON

echo "--- dlkit sample --trace: 200 steps of rank 0 of 2 (256 rows each), recorded as a trace"
"$DLKIT" sample "$out/bench-run.json" -d bench/train --world-size 2 --steps 200 --format bin \
  --out "$out/bench-indices.bin" --trace "$out/bench-trace.cbor" --quiet

echo "--- dlkit bench --trace: gather those rows (512 B each) with 2 producer threads; 1 ms of compute per batch on each side"
"$DLKIT" bench --manifest "$out/bench-run.json" --trace "$out/bench-trace.cbor" --rows 100000 \
  --row-bytes 512 --compute-ms 1 --consumer-ms 1 --workers 2 --buffers-ahead 3 --no-torch --quiet

echo "--- dlkit bench: a synthetic 5 ms nogil kernel per batch and a 5 ms training step"
"$DLKIT" bench --workload synthetic --steps 60 --compute-ms 5 --consumer-ms 5 --workers 2 --quiet
