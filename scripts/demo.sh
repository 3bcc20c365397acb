#!/usr/bin/env bash
# `make demo`: runs each section of scripts/demo.d in order against the bundled example.
# Each section gets the output directory as $1 and the dlkit command as $DLKIT.
set -euo pipefail
out=${1:-out/demo}
here=$(cd "$(dirname "$0")/.." && pwd)
export DLKIT="${DLKIT:-$here/.venv/bin/dlkit}"  # `make demo`: .venv-demo's
rm -rf "$out" && mkdir -p "$out"
for section in "$here"/scripts/demo.d/*.sh; do
  echo
  echo "=== $(basename "$section" .sh)"
  bash "$section" "$out"
done
echo
echo "demo finished: outputs in $out"
