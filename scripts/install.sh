#!/usr/bin/env bash
# Installs what voxelizer needs into .venv (idempotent): the Vulkan loader, lavapipe (Mesa's
# CPU Vulkan driver, used when there is no GPU) and the validation layer from Debian's
# packages when run as root, then the package with its test dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

# libusb-1.0-0: open3d (a test dependency, for to_open3d) links to it
packages="libvulkan1 mesa-vulkan-drivers vulkan-validationlayers python3 python3-venv libusb-1.0-0"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    missing=$(for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
    if [ -n "$missing" ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
