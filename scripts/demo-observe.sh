#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Traffic and observability on the demo's sandbox fleet (issue 14), called by scripts/demo.sh after the deploy
# (which ran with CT200_SANDBOX_TRAFFIC=router: sglang-router on the ct200_router host, every instance put in
# rotation by the drain step after its readiness gate). Also runs by hand while such a fleet is up.
#   1. the router URL and one chat completion through it,
#   2. a bad drafter planted on the last host (standin.json accept_length 1.0 next to its drafter, the unit
#      restarted between the product's drain steps: a drafter that degrades in the field; a rollout's gates
#      would refuse it),
#   3. one `ct200 status` table (the bad drafter breaks the acceptance rule: exit 1; ROUTER from the router),
#   4. Prometheus (Debian's package, its blackbox exporter) on the first host with playbooks/monitoring.yml
#      (short intervals for the demo), scraping every instance and the router,
#   5. CT200AcceptLengthLow firing for the planted host (bounded wait).
# Env: CT200_OBSERVE_PROM_PORT (19090), CT200_OBSERVE_BLACKBOX_PORT (19115), CT200_OBSERVE_RESTORE (1: put the good
# drafter back at the end; the demo tears the fleet down instead), CT200_OBSERVE_WAIT (120 s for the alert).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. .venv/bin/activate
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
PROM_PORT=${CT200_OBSERVE_PROM_PORT:-19090}
BOX_PORT=${CT200_OBSERVE_BLACKBOX_PORT:-19115}
WAIT=${CT200_OBSERVE_WAIT:-120}
SANDBOX=tests/support/sandbox/sandbox.sh
scripts/local-apt-repo.sh prometheus prometheus-blackbox-exporter >/dev/null   # Debian's packages, for the hosts

inventory=$(ansible-inventory -i inventories/sandbox --list)
field() { python -c "import json,sys; d=json.load(sys.stdin); print($1)" <<<"$inventory"; }
mapfile -t HOSTS < <(field '"\n".join(d["ct200"]["hosts"])')
((${#HOSTS[@]})) || { echo "no sandbox fleet: run scripts/demo.sh first (CT200_DEMO_KEEP=1 keeps it up)"; exit 1; }
MON=${HOSTS[0]}
BAD=${HOSTS[${#HOSTS[@]}-1]}
ROUTER_HOST=$(field '(d.get("ct200_router", {}).get("hosts") or [""])[0]')
hostvar() { ansible-inventory -i inventories/sandbox --host "$1" | python -c "import json,sys; print($2)"; }
port_of() { hostvar "$1" '30000 + int(json.load(sys.stdin)["ct200_sandbox_index"])'; }
ROUTER_PORT=""
[[ -n "$ROUTER_HOST" ]] && ROUTER_PORT=$(hostvar "$ROUTER_HOST" 'json.load(sys.stdin).get("ct200_router_port", 30080)')
chat() {  # $1 base URL: one short completion, its answer on one line
  curl -fsS --max-time 60 "$1/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model": "kimi-k2.6", "messages": [{"role": "user", "content": "Reply with OK."}], "max_tokens": 8}' \
    | python -c 'import json,sys; m=json.load(sys.stdin)["choices"][0]["message"]; print((m.get("content") or m.get("reasoning_content") or "")[:60])'
}

echo "== 3a. The client entry point: sglang-router on ${ROUTER_HOST:-?} (every instance drained through it)"
if [[ -n "$ROUTER_HOST" && -n "$ROUTER_PORT" ]]; then
  ROUTER_URL="http://127.0.0.1:$ROUTER_PORT"   # the sandbox hosts share this machine's network namespace
  echo "   router URL: $ROUTER_URL  (workers: $(curl -fsS --max-time 10 "$ROUTER_URL/workers" | python -c \
    'import json,sys; w=json.load(sys.stdin)["workers"]; print(", ".join("%s %s" % (x["url"], "healthy" if x.get("is_healthy") else "unhealthy") for x in w))'))"
  echo "   \$ curl $ROUTER_URL/v1/chat/completions ... -> $(chat "$ROUTER_URL")"
else
  echo "   no router in this inventory (CT200_SANDBOX_TRAFFIC=router, group ct200_router): ROUTER shows '-'"
fi

rotation() {  # $1 out|in, $2 host: the product's drain step (traffic.step) against the router, when there is one
  [[ -n "${ROUTER_URL:-}" ]] || return 0
  PYTHONPATH="$PWD/collections" python - "$1" "http://127.0.0.1:$(port_of "$2")" "$ROUTER_URL" <<'PY'
import sys
from ansible_collections.ct200.deploy.plugins.module_utils import traffic
state, url, router = sys.argv[1:]
print("   %s: %s" % (url, traffic.step("router", state, url, router=traffic.RouterClient(router), timeout=120)["reason"]))
PY
}
drafter() {  # $1 host, $2 standin.json content or "" to remove it; drained around the restart
  rotation out "$1"
  "$SANDBOX" exec "$1" -- sh -c '
    d=$(systemctl show -p ExecStart --value sglang@kimi | grep -o -- "--speculative-draft-model-path [^ ]*" | cut -d" " -f2)
    if [ -n "$0" ]; then echo "$0" > "$d/standin.json"; else rm -f "$d/standin.json"; fi
    systemctl restart sglang@kimi' "$2"
  local port; port=$(port_of "$1")
  for _ in $(seq 1 180); do curl -fsS --max-time 5 "http://127.0.0.1:$port/health_generate" >/dev/null 2>&1 && break; sleep 1; done
  rotation in "$1"
}
restore() { [[ "${CT200_OBSERVE_RESTORE:-1}" == 1 ]] && { drafter "$BAD" "" >/dev/null 2>&1 || true; }; true; }
trap restore EXIT

echo
echo "== 3b. A bad drafter planted on $BAD (accepts nothing: accept_length 1.0), one completion per instance"
drafter "$BAD" '{"accept_length": 1.0}'
for h in "${HOSTS[@]}"; do chat "http://127.0.0.1:$(port_of "$h")" >/dev/null; done

echo
echo "== 3c. One ct200 status table (ROUTER: the router's own worker list)"
echo "\$ ct200 status -i inventories/sandbox"
set +e
# this checkout's fleet command (the `ct200` on PATH may be another checkout's editable install)
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python -m ct200_fleet status -i inventories/sandbox | sed -n '/^HOST *INSTANCE/,$p'
echo "(exit ${PIPESTATUS[0]}: non-zero, $BAD breaks the acceptance rule)"
set -e

echo
echo "== 3d. Prometheus on $MON (Debian's prometheus and blackbox exporter), scraping every instance and the router"
t0=$SECONDS
# the sandbox hosts share this machine's ports: the packages' own services must not start on install
"$SANDBOX" exec "$MON" -- sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d'
ansible-playbook playbooks/monitoring.yml -i inventories/sandbox -e "ct200_monitoring_host=$MON" \
  -e "monitoring_port=$PROM_PORT" -e "monitoring_blackbox_port=$BOX_PORT" -e monitoring_scrape_interval=2s \
  -e monitoring_scrape_timeout=2s -e monitoring_evaluation_interval=2s -e monitoring_accept_for=10s \
  > "${CT200_DEMO_STATE_DIR:-.cache/demo}/monitoring.log" 2>&1 \
  || { tail -n 30 "${CT200_DEMO_STATE_DIR:-.cache/demo}/monitoring.log"; exit 1; }
echo "   installed in $((SECONDS - t0)) s: http://127.0.0.1:$PROM_PORT/alerts"

echo
echo "== 3e. The alert (Prometheus evaluates every 2 s; CT200AcceptLengthLow for: 10s)"
firing=""
deadline=$((SECONDS + WAIT))
while ((SECONDS < deadline)); do
  firing=$(curl -fsS --max-time 5 "http://127.0.0.1:$PROM_PORT/api/v1/alerts" 2>/dev/null | python -c '
import json, sys
for a in json.load(sys.stdin)["data"]["alerts"]:
    if a["labels"]["alertname"] == "CT200AcceptLengthLow" and a["state"] == "firing":
        print("FIRING %s %s/%s value=%s: %s" % (a["labels"]["alertname"], a["labels"]["ct200_host"],
              a["labels"]["ct200_instance"], a["value"], a["annotations"]["summary"]))' || true)
  [[ -n "$firing" ]] && break
  sleep 2
done
[[ -n "$firing" ]] || { echo "CT200AcceptLengthLow did not fire within ${WAIT} s"; exit 1; }
echo "$firing"
echo "   (this step: $SECONDS s)"
