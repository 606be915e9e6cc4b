#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A flat local Debian repository for the sandbox hosts, which have no internet:
# the .debs of PKG... and of every dependency the sandbox rootfs lacks are
# fetched ON THE CONTROLLER with `apt-get download` and indexed with
# dpkg-scanpackages, so a role's ansible.builtin.apt installs Debian's real
# packages inside the hosts (as an air-gapped site does from its own mirror).
#
# Usage: scripts/local-apt-repo.sh [--dest DIR] PKG...
#   DIR default <repo>/.cache/apt-repo. Additive: packages of earlier calls stay,
#   so several roles (ninja-build numactl, nginx-light, ...) share one repo.
# Writes DIR/Packages(.gz) and DIR/sources.list with the one line the hosts use:
#   deb [trusted=yes] file:/srv/apt-repo ./
# Hosts see it with: tests/support/sandbox/sandbox.sh up N --bind DIR:/srv/apt-repo:ro \
#   --bind DIR/sources.list:/etc/apt/sources.list:ro
# (binding sources.list replaces the rootfs's internet mirrors: apt-get update
# inside a host then talks to nothing but this directory).
# Env: CT200_SANDBOX_ROOTFS (default /var/lib/ct200-sandbox/rootfs) -- the
# packages already installed there are not fetched. Idempotent; flock'ed.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
DEST="${REPO_ROOT}/.cache/apt-repo"
if [[ "${1:-}" == "--dest" ]]; then DEST="$2"; shift 2; fi
(($#)) || { echo "usage: $0 [--dest DIR] PKG..." >&2; exit 2; }
ROOTFS="${CT200_SANDBOX_ROOTFS:-/var/lib/ct200-sandbox/rootfs}"
[[ -f "${ROOTFS}/var/lib/dpkg/status" ]] || { echo "local-apt-repo: no rootfs at ${ROOTFS}: run tests/support/sandbox/build-rootfs.sh" >&2; exit 2; }
command -v dpkg-scanpackages >/dev/null || { echo "local-apt-repo: dpkg-scanpackages missing: apt-get install dpkg-dev" >&2; exit 2; }

mkdir -p "${DEST}"
exec 9>"${DEST}.lock"
flock 9

have=$(dpkg-query --admindir="${ROOTFS}/var/lib/dpkg" -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1=="ii"{print $2}' | sort -u)
# Real packages in the dependency closure (virtual ones are printed in <>).
want=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
         --no-replaces --no-enhances "$@" | grep -v '^[ <]' | sed 's/:any$//' | sort -u)
missing=$(comm -23 <(printf '%s\n' "${want}") <(printf '%s\n' "${have}"))
fetched=()
for pkg in ${missing}; do
  ls "${DEST}/${pkg}"_*.deb >/dev/null 2>&1 || fetched+=("${pkg}")
done
if ((${#fetched[@]})); then
  echo "local-apt-repo: apt-get download ${fetched[*]}"
  (cd "${DEST}" && timeout 300 apt-get download -q "${fetched[@]}")
fi
# Sandbox hosts may be reading these files right now (tests run side by side, and sources.list is
# bind-mounted into hosts as their /etc/apt/sources.list): rewrite them only when the set of
# packages changed, each renamed into place whole.
if ((${#fetched[@]})) || [[ ! -f "${DEST}/Packages.gz" ]]; then
  (cd "${DEST}" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null > Packages.tmp \
     && gzip -9nc Packages.tmp > Packages.gz.tmp && mv Packages.tmp Packages && mv Packages.gz.tmp Packages.gz)
fi
sources='deb [trusted=yes] file:/srv/apt-repo ./'
if [[ "$(cat "${DEST}/sources.list" 2>/dev/null)" != "${sources}" ]]; then
  echo "${sources}" > "${DEST}/sources.list.tmp" && mv "${DEST}/sources.list.tmp" "${DEST}/sources.list"
fi
echo "local-apt-repo: ${DEST}: $(grep -c '^Package:' "${DEST}/Packages") packages (asked: $*)"
