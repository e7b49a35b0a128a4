#!/usr/bin/env bash
# Makes sure a headless-capable Chromium exists for the status page's browser
# test (statuspage), installing Debian's chromium and chromium-driver packages
# only when missing. The test looks for chromium in $CHROMIUM, then in PATH
# (chromium, chromium-browser, google-chrome), then /usr/bin/chromium.
set -euo pipefail
have() {
  if [ -n "${CHROMIUM:-}" ] && [ -x "$CHROMIUM" ]; then return 0; fi
  command -v chromium >/dev/null 2>&1 && return 0
  command -v chromium-browser >/dev/null 2>&1 && return 0
  return 1
}
if have; then exit 0; fi
echo "chromium missing: installing Debian's chromium and chromium-driver packages" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
have || { echo "chromium installed but not found in PATH" >&2; exit 1; }
