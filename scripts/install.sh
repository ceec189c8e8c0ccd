#!/usr/bin/env bash
# Installs voxelizer into .venv, editable, for this checkout:
#   bash scripts/install.sh         what `voxelize` needs: the Vulkan loader and lavapipe (Mesa's
#                                   CPU Vulkan driver, used where there is no GPU) from Debian's
#                                   packages when run as root, then the package
#   bash scripts/install.sh --dev   also the validation layer and the test and docs tools
#                                   (the extras `test` and `docs`)
# Quiet, and quick, when there is nothing to do: the package is installed again only when
# pyproject.toml or the extras asked for changed. apt waits for the package lock that another
# apt process (a fresh machine's boot-time upgrades) may hold.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
for arg in "$@"; do
    case "$arg" in
        --dev) dev=1 ;;
        -h | --help)
            sed -n '2,10s/^# \{0,1\}//p' "$0"
            exit 0
            ;;
        *)
            echo "install.sh: unknown option $arg (the only one is --dev)" >&2
            exit 2
            ;;
    esac
done

packages="libvulkan1 mesa-vulkan-drivers python3 python3-venv"
extras=""
if [ "$dev" = 1 ]; then
    # Every test run uses the validation layer; open3d (a test dependency) links to libusb.
    packages="$packages vulkan-validationlayers libusb-1.0-0"
    extras="[test,docs]"
fi

apt_get() {
    # DPkg::Lock::Timeout makes install wait for dpkg's lock; update takes the lists' lock,
    # which that option does not cover on every apt version: retried while another holds it.
    local attempt output
    for attempt in $(seq 1 60); do
        if output=$(apt-get -o DPkg::Lock::Timeout=600 "$@" 2>&1); then
            return 0
        fi
        if ! grep -q "Could not get lock" <<<"$output"; then
            echo "$output" >&2
            return 1
        fi
        [ "$attempt" = 1 ] && echo "install.sh: waiting for another apt process to finish" >&2
        sleep 10
    done
    echo "$output" >&2
    return 1
}

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    missing=$(for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
    if [ -n "$missing" ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt_get update -qq
        # shellcheck disable=SC2086  # one word per package
        apt_get install -y -qq --no-install-recommends $missing
    fi
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
fi

# The package's bytecode, written here once (it skips what is up to date): an editable
# install's modules are otherwise compiled again by every process where bytecode is not
# written (PYTHONDONTWRITEBYTECODE), 0.3-0.5 s of each command's start on 2 cores.
.venv/bin/python -m compileall -q voxelizer >/dev/null

# What was installed: the extras and pyproject.toml's digest. A user install after a --dev one
# keeps the dev tools.
stamp=.venv/voxelizer-install
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1) $extras"
have=$(cat "$stamp" 2>/dev/null || true)
dev_have="$(sha256sum pyproject.toml | cut -d' ' -f1) [test,docs]"
if [ -x .venv/bin/voxelize ] && { [ "$have" = "$wanted" ] || [ "$have" = "$dev_have" ]; }; then
    exit 0
fi
rm -f "$stamp"
# setuptools tells every editable install how it works (a warning, "Editable installation"):
# nothing to act on, so not shown.
PYTHONWARNINGS="ignore:Editable installation" \
    .venv/bin/python -m pip install -q --disable-pip-version-check -e ".$extras"
echo "$wanted" >"$stamp"
