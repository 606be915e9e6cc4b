#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Observability demo snippet (issue 14; not wired into scripts/demo.sh yet): run it while the sandbox fleet of
# scripts/demo.sh is up and deployed (inventories/sandbox, hosts sharing this machine's network namespace).
#   1. plants a bad drafter on the last host (standin.json accept_length 1.0 next to its drafter, unit restarted),
#   2. prints one `ct200 status` table (the bad drafter breaks the acceptance rule: exit 1),
#   3. installs Prometheus on the first host with playbooks/monitoring.yml (short intervals) and waits until
#      CT200AcceptLengthLow fires for the planted host,
#   4. puts the good drafter back.
# Env: CT200_OBSERVE_PROM_PORT (default 19090).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. .venv/bin/activate
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
PROM_PORT=${CT200_OBSERVE_PROM_PORT:-19090}
SANDBOX=tests/support/sandbox/sandbox.sh
scripts/local-apt-repo.sh prometheus >/dev/null   # Debian's package, for the hosts' local apt repository

mapfile -t HOSTS < <(ansible-inventory -i inventories/sandbox --list | python -c \
  'import json,sys; print("\n".join(json.load(sys.stdin)["ct200"]["hosts"]))')
((${#HOSTS[@]})) || { echo "no sandbox fleet: run scripts/demo.sh first (CT200_DEMO_KEEP=1 keeps it up)"; exit 1; }
MON=${HOSTS[0]}
BAD=${HOSTS[${#HOSTS[@]}-1]}

drafter() {  # $1 host, $2 standin.json content or "" to remove it
  "$SANDBOX" exec "$1" -- sh -c '
    d=$(systemctl show -p ExecStart --value sglang@kimi | grep -o -- "--speculative-draft-model-path [^ ]*" | cut -d" " -f2)
    if [ -n "$0" ]; then echo "$0" > "$d/standin.json"; else rm -f "$d/standin.json"; fi
    systemctl restart sglang@kimi' "$2"
}
restore() { drafter "$BAD" "" >/dev/null 2>&1 || true; }
trap restore EXIT

echo "== planting a bad drafter on $BAD (accepts nothing: accept_length 1.0)"
drafter "$BAD" '{"accept_length": 1.0}'

echo "== one completion per instance (the acceptance length is known after the first verify step)"
for h in "${HOSTS[@]}"; do
  port=$(ansible-inventory -i inventories/sandbox --host "$h" | python -c 'import json,sys; print(30000 + int(json.load(sys.stdin)["ct200_sandbox_index"]))')
  for _ in $(seq 1 120); do curl -fsS "http://127.0.0.1:$port/health_generate" >/dev/null 2>&1 && break; sleep 1; done
  curl -fsS "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model": "kimi-k2.6", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}' >/dev/null
done

echo
echo "\$ ct200 status -i inventories/sandbox"
set +e
ct200 status -i inventories/sandbox | sed -n '/^HOST *INSTANCE/,$p'
echo "(exit ${PIPESTATUS[0]}: non-zero, $BAD breaks the acceptance rule)"
set -e

echo
echo "== Prometheus on $MON (Debian's package), scraping every instance; short for:/intervals for the demo"
ansible-playbook playbooks/monitoring.yml -i inventories/sandbox -e "ct200_monitoring_host=$MON" \
  -e "monitoring_port=$PROM_PORT" -e monitoring_scrape_interval=2s -e monitoring_scrape_timeout=2s \
  -e monitoring_evaluation_interval=2s -e monitoring_accept_for=10s | tail -n 4
echo "   http://127.0.0.1:$PROM_PORT/alerts"
for _ in $(seq 1 60); do
  firing=$(curl -fsS "http://127.0.0.1:$PROM_PORT/api/v1/alerts" 2>/dev/null | python -c '
import json, sys
for a in json.load(sys.stdin)["data"]["alerts"]:
    if a["labels"]["alertname"] == "CT200AcceptLengthLow" and a["state"] == "firing":
        print("FIRING %s %s/%s value=%s: %s" % (a["labels"]["alertname"], a["labels"]["ct200_host"],
              a["labels"]["ct200_instance"], a["value"], a["annotations"]["summary"]))' || true)
  [[ -n "$firing" ]] && break
  sleep 2
done
[[ -n "$firing" ]] || { echo "CT200AcceptLengthLow did not fire"; exit 1; }
echo "$firing"
