#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# build-rootfs.sh's customize hook: install ct200_sandbox_zipcache.py (a cache of the code zipimport
# compiles for every Ansible task; see that file) into the tree ROOT, imported from Debian's
# sitecustomize, so every interpreter of the host and the venvs made from it load it.
# Usage: install-zipcache.sh ROOT
set -eu
root=$1
here=$(dirname "$0")
found=0
for lib in "$root"/usr/lib/python3.[0-9]*; do
  [ -f "$lib/os.py" ] || continue
  version=$(basename "$lib")
  install -m 0644 "$here/ct200_sandbox_zipcache.py" "$lib/ct200_sandbox_zipcache.py"
  site="$root/etc/$version/sitecustomize.py"
  if [ ! -e "$site" ]; then  # Debian links the stdlib's sitecustomize.py to /etc/pythonX.Y/
    mkdir -p "$(dirname "$site")" && : >"$site"
    ln -sf "/etc/$version/sitecustomize.py" "$lib/sitecustomize.py"
  fi
  printf '%s\n' "" "# ct200 sandbox hosts only: tests/support/sandbox/ct200_sandbox_zipcache.py" \
    "try:" "    import ct200_sandbox_zipcache" "except Exception:  # the host runs as before, without the cache" \
    "    pass" >>"$site"
  found=1
done
[ "$found" = 1 ] || { echo "install-zipcache: no python3 standard library under $root/usr/lib" >&2; exit 1; }
# each user's entries go under its own 0700 directory (the module makes it); the sticky bit keeps them apart
install -d -m 1777 "$root/var/cache/ct200-zipimport"
