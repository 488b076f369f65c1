#!/usr/bin/env bash
# install-deps.sh PKG... - installs the Debian packages among PKG that are missing (apt-get,
# with sudo when not root). Does nothing when all are present.
set -euo pipefail
missing=""
for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -n "$missing" ] || exit 0
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
