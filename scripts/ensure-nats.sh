#!/usr/bin/env bash
# Makes sure a nats-server >= 2.10.23 is available and prints its path on stdout.
# Order: $NATS_SERVER_BIN, the project's own copy in .tools/, the PATH; when none is
# recent enough, Debian trixie's package is fetched with a private apt configuration
# (the system's sources and state are untouched) and unpacked into .tools/.
# Why 2.10.23: bookworm's 2.9.10 acknowledges several concurrent compare-and-appends
# on a replicated stream, and 2.10.20-22 lose acknowledged writes on crash-restart.
set -euo pipefail
MIN_VERSION=2.10.23
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools/nats-server"
local_bin="$tools/pkg/usr/sbin/nats-server"

log() { printf 'ensure-nats: %s\n' "$*" >&2; }

version_of() { "$1" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n1; }

recent_enough() {
  local v; v=$(version_of "$1") || return 1
  [ -n "$v" ] || return 1
  [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$v" | sort -V | head -n1)" = "$MIN_VERSION" ]
}

for candidate in "${NATS_SERVER_BIN:-}" "$local_bin" "$(command -v nats-server 2>/dev/null || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then
    if recent_enough "$candidate"; then printf '%s\n' "$candidate"; exit 0; fi
    log "ignoring $candidate: version $(version_of "$candidate" || echo unknown) is older than $MIN_VERSION"
  fi
done

cannot() {
  cat >&2 <<MSG
ensure-nats: no nats-server >= $MIN_VERSION was found, and it cannot be installed here: $1
  The coordinator needs nats-server $MIN_VERSION or newer (older servers acknowledge
  concurrent compare-and-appends on replicated streams, or lose acknowledged writes).
  Do one of:
  - install nats-server >= $MIN_VERSION (an official release binary, or your package
    manager) and put it on the PATH, or point NATS_SERVER_BIN at it;
  - run this script as root on a Debian/Ubuntu machine, where it fetches Debian
    trixie's package into .tools/ without touching the system;
  - with a Docker engine: LEASE_TEST_NATS=container runs the tests against the
    nats:2.10 image instead (testcontainers).
MSG
  exit 1
}

command -v apt-get >/dev/null 2>&1 || cannot "apt-get is not available"
command -v dpkg-deb >/dev/null 2>&1 || cannot "dpkg-deb is not available"
[ "$(id -u)" = 0 ] || cannot "apt-get download needs root here (you are $(id -un))"

log "fetching nats-server from Debian trixie into $tools (private apt configuration)"
apt_dir="$tools/apt"
rm -rf "$apt_dir" && mkdir -p "$apt_dir"/{state/lists/partial,cache/archives/partial,etc} "$tools/pkg"
touch "$apt_dir/state/status"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
  >"$apt_dir/etc/sources.list"
apt_opts=(
  -o "Dir::Etc::SourceList=$apt_dir/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State=$apt_dir/state" -o "Dir::State::status=$apt_dir/state/status"
  -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root -o Debug::NoLocking=1
)
apt-get "${apt_opts[@]}" -qq update >&2 || cannot "apt-get update of the trixie sources failed"
(cd "$apt_dir" && apt-get "${apt_opts[@]}" -qq download nats-server >&2) || cannot "apt-get download nats-server failed"
deb=$(ls "$apt_dir"/nats-server_*.deb | head -n1)
dpkg-deb -x "$deb" "$tools/pkg"
rm -rf "$apt_dir"
recent_enough "$local_bin" || cannot "the fetched package holds version $(version_of "$local_bin" || echo unknown)"
log "installed $(version_of "$local_bin") at $local_bin"
printf '%s\n' "$local_bin"
