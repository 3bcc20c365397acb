#!/usr/bin/env bash
# The relational database: draft a schema, preprocess the bundled example into "$1/db", verify
# it, and show that a flipped byte is caught. Later sections sample from "$1/db".
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
example="$here/fixtures/example_db"
DLKIT=${DLKIT:-dlkit}

echo "--- dlkit schema infer: a draft dlkit.toml from the Parquet files (first lines)"
"$DLKIT" schema infer "$example" --out "$out/draft.toml"
head -n 16 "$out/draft.toml"

echo "--- dlkit preprocess: fixtures/example_db (4 tables, 3 tasks) -> $out/db"
"$DLKIT" preprocess "$example" "$out/db"

echo "--- dlkit verify: sizes, SHA-256 and structure of every file"
"$DLKIT" verify "$out/db"

echo "--- a copy with one flipped byte fails verification (exit code 3)"
cp -r "$out/db" "$out/db-corrupt"
printf '\xff' | dd of="$out/db-corrupt/graph.bin" bs=1 seek=100 conv=notrunc status=none
if "$DLKIT" verify "$out/db-corrupt"; then
  echo "corruption was not detected" >&2
  exit 1
else
  echo "(exit code $? as expected)"
fi
rm -rf "$out/db-corrupt"
