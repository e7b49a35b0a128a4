#!/usr/bin/env bash
# Makes sure the Postgres server binaries (initdb, pg_ctl, postgres) exist,
# installing Debian's postgresql package only when they are missing.
set -euo pipefail
have() {
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
  if command -v pg_config >/dev/null 2>&1; then
    local bin; bin=$(pg_config --bindir)
    [ -x "$bin/initdb" ] && [ -x "$bin/pg_ctl" ] && return 0
  fi
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && return 0
  done
  return 1
}
if have; then exit 0; fi
echo "postgres server binaries missing: installing Debian's postgresql package" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq postgresql >/dev/null
have || { echo "postgresql installed but initdb/pg_ctl still not found" >&2; exit 1; }
