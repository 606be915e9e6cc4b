#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run the whole suite (unit, module tests against the local Hub, SGLang parser
# checks, Molecule scenarios on sandbox hosts, lint, docs) and end with one
# plain "N passed, N failed" line. Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. .venv/bin/activate
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
mkdir -p tests/output
rm -f tests/output/junit.xml
# Tests wait on sandbox hosts booting, Molecule and playbook runs: a few workers overlap those waits
# even on 2 cores. Tests sharing a fleet or a served host stay on one worker (tests/conftest.py:
# work_unit). CT200_TEST_WORKERS=0 runs serially.
workers=${CT200_TEST_WORKERS:-3}
parallel=()
if [ "$workers" != 0 ] && python -c 'import xdist' 2>/dev/null; then
  parallel=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
fi
# With the kernel's autogroup scheduling on, every session (each sshd session running a module on a fleet host,
# each unit inside a sandbox host) gets as much CPU as all of pytest together, and tests/conftest.py's nice-based
# priority for the longest chain counts only inside pytest's own session. Plain per-task weights for the run; the
# machine's setting is put back on exit. Without the right to change it, the run goes on as it is.
autogroup=/proc/sys/kernel/sched_autogroup_enabled
autogroup_was=""
if [ -w "$autogroup" ] && autogroup_was=$(cat "$autogroup") && [ "$autogroup_was" != 0 ]; then
  echo 0 2>/dev/null > "$autogroup" || autogroup_was=""
  trap 'echo "$autogroup_was" > "$autogroup"' EXIT
fi
# timeout signals the whole process group (the xdist workers too); its exit 124 is kept.
timeout --kill-after=60 "${CT200_TEST_TIMEOUT:-4800}" \
  python -m pytest tests -p no:cacheprovider "${parallel[@]}" --durations=25 \
  --junitxml=tests/output/junit.xml "$@"
rc=$?
python - <<'PY'
import os, xml.etree.ElementTree as ET
path = "tests/output/junit.xml"
if not os.path.exists(path):
    print("0 passed, 1 failed")
    raise SystemExit
root = ET.parse(path).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
total = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print("%d passed, %d failed, %d skipped" % (total - failed - skipped, failed, skipped))
PY
# pytest exit 5 = no tests collected: that is a failure of the suite, not a pass.
exit $rc
