#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Test support: a flat apt repository with nginx-light and what it pulls in on bookworm (and python3-apt)
# (nginx-light is a transitional package there: nginx + libnginx-mod-http-echo), for sandbox
# hosts that have no internet.  Also unpacks nginx into DIR/root so tests can run Debian's
# binary in plain network namespaces without installing it on this machine.
#
#   tests/fanout/local_apt_repo.sh DIR      -> DIR/repo (Packages.gz), DIR/root/usr/sbin/nginx
#
# Interim until the shared local apt repo builder (helper `runtime`) carries nginx-light.
# Hosts use it with:  deb [trusted=yes] file:///DIR/repo ./
set -euo pipefail
dir=${1:?usage: $0 DIR}
# python3-apt (+ what the sandbox rootfs lacks of it): ansible.builtin.apt needs it on the host.
pkgs=(nginx-light nginx nginx-common libnginx-mod-http-echo python3-apt python-apt-common distro-info-data)
mkdir -p "$dir/repo" "$dir/root"
cd "$dir/repo"
have=1
for p in "${pkgs[@]}"; do compgen -G "${p}_*.deb" >/dev/null || have=0; done
if [[ $have == 0 ]]; then
  timeout 300 apt-get download -qq "${pkgs[@]}" \
    || { timeout 300 apt-get update -qq && timeout 300 apt-get download -qq "${pkgs[@]}"; }
fi
dpkg-scanpackages --multiversion . /dev/null 2>/dev/null > Packages
gzip -9kf Packages
if [[ ! -x $dir/root/usr/sbin/nginx ]]; then
  for deb in nginx_*.deb nginx-common_*.deb libnginx-mod-http-echo_*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
fi
echo "$dir/repo"
