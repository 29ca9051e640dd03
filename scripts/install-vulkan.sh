#!/usr/bin/env bash
# Mesa's software Vulkan driver (lavapipe) from Debian 12's backports, which LiteRT's GPU accelerator (WebGPU over
# Vulkan) runs on without a GPU: target="gpu"'s check before writing and the GPU tests use it. As root on Debian 12
# (bookworm); elsewhere, install your distribution's Vulkan driver (mesa-vulkan-drivers, 23 or newer) and loader.
set -euo pipefail
if ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 \
        && dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | grep -qv '^22\.'; then
    exit 0  # there already, and new enough
fi
if [ "$(id -u)" != 0 ] || ! grep -q bookworm /etc/os-release; then
    echo "install-vulkan: needs root on Debian 12; install mesa-vulkan-drivers (23+) and libvulkan1 yourself" >&2
    exit 1
fi
if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
    cat > /etc/apt/sources.list.d/bookworm-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null
echo "install-vulkan: $(dpkg-query -W -f='mesa-vulkan-drivers ${Version}' mesa-vulkan-drivers)"
