#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build the Debian bookworm root filesystem that every sandbox host boots
# (systemd-nspawn --volatile=overlay, so one read-only tree serves all hosts).
#
# Usage: tests/support/sandbox/build-rootfs.sh [--force]
#
# Environment:
#   CT200_SANDBOX_ROOTFS   target directory (default /var/lib/ct200-sandbox/rootfs)
#   CT200_SANDBOX_MIRRORS  newline-separated "deb URI SUITE COMPONENTS" lines;
#                          default: the bookworm* entries of this machine's apt
#                          sources (/etc/apt/sources.list{,.d/*.list,.d/*.sources})
#
# Idempotent: a stamp file next to the rootfs records a hash of the package
# list, mirrors and customisation; when it matches, nothing is done.
# The tree is built in a temporary directory and renamed into place, so an
# interrupted build never leaves a half-built rootfs behind the stamp.
# Exit codes: 0 ok (built or up to date), 1 build failed, 2 usage/environment.
set -euo pipefail

ROOTFS=${CT200_SANDBOX_ROOTFS:-/var/lib/ct200-sandbox/rootfs}
STAMP="${ROOTFS%/}.stamp"
LOCK="${ROOTFS%/}.lock"
SUITE=bookworm
# Keep sorted; changing this list changes the stamp and triggers a rebuild.
# openssh-server: part of a production host's base OS; sandbox.sh --netns
# starts it per host (it stays disabled for hosts sharing the machine's network).
PACKAGES=(ca-certificates curl dbus iproute2 openssh-server procps python3 python3-venv
          sudo systemd systemd-sysv util-linux)
# Tools this script and sandbox.sh need on the machine itself.
HOST_PREREQS=(mmdebstrap systemd-container iproute2 util-linux ca-certificates)
MMDEBSTRAP_TIMEOUT=${CT200_SANDBOX_BUILD_TIMEOUT:-600}
APT_TIMEOUT=300
# Bump when the customisation below changes (forces a rebuild).
CUSTOMIZE_VERSION=4
# Files the tree gets from here (install-zipcache.sh): their content is part of the stamp too.
HERE=$(cd "$(dirname "$0")" && pwd)
ZIPCACHE_FILES=("$HERE/install-zipcache.sh" "$HERE/ct200_sandbox_zipcache.py")

log() { printf 'build-rootfs: %s\n' "$*" >&2; }
die() { printf 'build-rootfs: ERROR: %s\n' "$*" >&2; exit "${2:-1}"; }

FORCE=0
case "${1:-}" in
  "") ;;
  --force) FORCE=1 ;;
  -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
  *) die "unknown argument '$1' (usage: $0 [--force])" 2 ;;
esac

[[ $(id -u) -eq 0 ]] || die "must run as root (mmdebstrap and systemd-nspawn need it); re-run with sudo" 2
case "$ROOTFS" in
  /*) ;;
  *) die "CT200_SANDBOX_ROOTFS must be an absolute path, got '$ROOTFS'" 2 ;;
esac
[[ "$ROOTFS" != "/" ]] || die "CT200_SANDBOX_ROOTFS must not be /" 2

# --- host prerequisites ----------------------------------------------------
install_prereqs() {
  local missing=()
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v nsenter >/dev/null || missing+=(util-linux)
  [[ -e /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
  ((${#missing[@]})) || return 0
  log "installing host prerequisites: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  timeout "$APT_TIMEOUT" apt-get -o DPkg::Lock::Timeout=120 update -qq \
    || die "apt-get update failed (is deb.debian.org reachable?)"
  timeout "$APT_TIMEOUT" apt-get -o DPkg::Lock::Timeout=120 install -y -qq \
    --no-install-recommends "${HOST_PREREQS[@]}" \
    || die "apt-get install ${HOST_PREREQS[*]} failed"
}

# --- mirrors ---------------------------------------------------------------
# Prints one "deb URI SUITE COMPONENTS" line per bookworm* suite found in the
# machine's apt sources (one-line and deb822 formats).
machine_mirrors() {
  python3 - "$SUITE" <<'PY'
import glob, re, sys
suite = sys.argv[1]
out = []
def add(uri, suites, comps):
    for s in suites:
        if s == suite or s.startswith(suite + "-"):
            line = "deb %s %s %s" % (uri, s, " ".join(comps) or "main")
            if line not in out:
                out.append(line)
def strip_opts(rest):
    # "deb [signed-by=...] uri suite comps"
    return re.sub(r"^\[[^\]]*\]\s*", "", rest)
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        parts = strip_opts(line[4:].strip()).split()
        if len(parts) >= 2:
            add(parts[0], [parts[1]], parts[2:])
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    stanza = {}
    def flush():
        if stanza and "deb" in stanza.get("types", "").split() \
                and stanza.get("enabled", "yes").lower() != "no":
            for uri in stanza.get("uris", "").split():
                add(uri, stanza.get("suites", "").split(), stanza.get("components", "").split())
    key = None
    for raw in open(path).read().splitlines() + [""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            flush(); stanza = {}; key = None
            continue
        if raw[0].isspace() and key:
            stanza[key] += " " + raw.strip()
            continue
        if ":" in raw:
            key, val = raw.split(":", 1)
            key = key.strip().lower()
            stanza[key] = val.strip()
print("\n".join(out))
PY
}

install_prereqs

if [[ -n "${CT200_SANDBOX_MIRRORS:-}" ]]; then
  MIRRORS=$CT200_SANDBOX_MIRRORS
else
  MIRRORS=$(machine_mirrors)
fi
[[ -n "$MIRRORS" ]] || die "no '$SUITE' deb sources found in /etc/apt; set CT200_SANDBOX_MIRRORS='deb http://deb.debian.org/debian $SUITE main'" 2
mapfile -t MIRROR_ARGS <<<"$MIRRORS"

WANT_STAMP=$( (printf '%s\n' "suite=$SUITE" "customize=$CUSTOMIZE_VERSION" \
  "packages=${PACKAGES[*]}" "$MIRRORS"; cat "${ZIPCACHE_FILES[@]}") | sha256sum | cut -d' ' -f1)

mkdir -p "$(dirname "$ROOTFS")"
exec 9>"$LOCK"
if ! flock -w 900 9; then
  die "another build holds $LOCK for more than 15 min" 1
fi

if ((FORCE == 0)) && [[ -f "$STAMP" && -x "$ROOTFS/lib/systemd/systemd" ]] \
   && [[ "$(cat "$STAMP")" == "$WANT_STAMP" ]]; then
  log "rootfs $ROOTFS is up to date (stamp $WANT_STAMP)"
  exit 0
fi

# PIDs of the systemd-nspawn processes booted from the current tree.
nspawn_users() { pgrep -f -- "^systemd-nspawn -D $ROOTFS " || true; }

# A tree moved aside by an earlier build is deleted once every host that was
# running from it is gone (its .users file lists their nspawn PIDs).
remove_unused_old_trees() {
  local old pid busy
  for old in "${ROOTFS%/}".old.*; do
    [[ -d "$old" && -f "$old.users" ]] || continue
    busy=0
    while read -r pid; do
      [[ -n "$pid" ]] && grep -qa -- "systemd-nspawn" "/proc/$pid/cmdline" 2>/dev/null && busy=1
    done <"$old.users"
    if ((busy == 0)); then
      rm -rf --one-file-system "$old" && rm -f "$old.users"
    fi
  done
}

TMP="${ROOTFS%/}.tmp.$$"
cleanup() { [[ -n "${TMP:-}" && -d "$TMP" ]] && rm -rf --one-file-system "$TMP"; true; }
trap cleanup EXIT

log "building $SUITE rootfs in $TMP from:"
printf '  %s\n' "${MIRROR_ARGS[@]}" >&2
start=$(date +%s)
# No /etc/hostname: systemd then keeps the name nspawn --hostname gives.
# Customisation runs inside mmdebstrap (customize hooks) so the tree is
# complete before it is renamed into place.
timeout "$MMDEBSTRAP_TIMEOUT" mmdebstrap \
  --variant=minbase \
  --include="$(IFS=,; echo "${PACKAGES[*]}")" \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --customize-hook='rm -f "$1/etc/hostname"' \
  --customize-hook='printf "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" > "$1/etc/hosts"' \
  --customize-hook='rm -f "$1/etc/machine-id" "$1/var/lib/dbus/machine-id"; : > "$1/etc/machine-id"' \
  --customize-hook='mkdir -p "$1/srv/wheelhouse"' \
  --customize-hook='chroot "$1" systemctl disable --quiet ssh.service ssh.socket 2>/dev/null || true' \
  --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
  --customize-hook="'$HERE/install-zipcache.sh' \"\$1\"" \
  --customize-hook='printf "%s\n" "# ct200 sandbox: per-host key from sandbox.sh --netns (bind-mounted)" "HostKey /etc/ssh/ssh_host_ed25519_key" "PasswordAuthentication no" "KbdInteractiveAuthentication no" "PermitRootLogin prohibit-password" > "$1/etc/ssh/sshd_config.d/ct200-sandbox.conf"' \
  "$SUITE" "$TMP" "${MIRROR_ARGS[@]}" \
  || die "mmdebstrap failed or timed out after ${MMDEBSTRAP_TIMEOUT}s (see output above)"

[[ -x "$TMP/lib/systemd/systemd" && -x "$TMP/usr/bin/python3" && -x "$TMP/usr/sbin/sshd" ]] \
  || die "built tree lacks systemd, python3 or sshd; refusing to install it"

rm -f "$STAMP"
if [[ -e "$ROOTFS" ]]; then
  users=$(nspawn_users)
  if [[ -n "$users" ]]; then
    # Hosts still run from it (other checkouts' fleets): never delete files under
    # their overlays; move the tree aside, new hosts boot the new one.
    old="${ROOTFS%/}.old.$(date +%s)"
    printf '%s\n' "$users" >"$old.users"
    mv "$ROOTFS" "$old"
    log "hosts still run from the previous tree: kept as $old until they are down"
  else
    rm -rf --one-file-system "$ROOTFS"
  fi
fi
mv "$TMP" "$ROOTFS"
remove_unused_old_trees
printf '%s\n' "$WANT_STAMP" >"$STAMP.new" && mv "$STAMP.new" "$STAMP"
log "built $ROOTFS in $(( $(date +%s) - start ))s ($(du -sh "$ROOTFS" | cut -f1))"
