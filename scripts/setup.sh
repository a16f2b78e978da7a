#!/usr/bin/env bash
# One-time (and idempotent) set-up on a fresh clone: npm packages, nats-server >= 2.10.23,
# then a build of every package. The README's two commands both start here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "setup: Node.js >= 20 is required (found $(node -v))." >&2
  exit 1
fi

# Install when node_modules is missing or older than the lock file.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm packages" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
fi

bash scripts/ensure-nats.sh >/dev/null

npx tsc -b >&2
npx tsc -p tsconfig.test.json >&2
