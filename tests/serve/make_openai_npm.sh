#!/bin/bash
# Installs the official OpenAI client for JavaScript (npm package openai, 4.x: the last line
# that runs on node 18) into OUT_DIR/node, for serve_openai_npm_test.py.
#   make_openai_npm.sh OUT_DIR
# Run by ctest as the serve_npm_fixtures test. Fails (non-zero, with a message) when node or
# npm is missing or the registry cannot be reached: the client test is never skipped silently.
set -euo pipefail
out=${1:?usage: make_openai_npm.sh OUT_DIR}
package=openai@4.104.0

for tool in node npm; do
  if ! command -v "$tool" > /dev/null; then
    echo "make_openai_npm.sh: '$tool' is not installed (Debian: apt-get install nodejs npm)" >&2
    exit 1
  fi
done
mkdir -p "$out/node"
if [ -f "$out/node/node_modules/openai/package.json" ] &&
   grep -q '"version": "4.104.0"' "$out/node/node_modules/openai/package.json"; then
  echo "make_openai_npm.sh: $package already in $out/node"
  exit 0
fi
if ! npm install --prefix "$out/node" --no-audit --no-fund --fetch-retries=1 --fetch-timeout=60000 "$package"; then
  echo "make_openai_npm.sh: 'npm install $package' failed; the npm registry must be reachable" >&2
  exit 1
fi
