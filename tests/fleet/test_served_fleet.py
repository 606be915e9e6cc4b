# SPDX-License-Identifier: Apache-2.0
"""The served fleet (tests/fleet/conftest.py: served_fleet): one full deploy_kimi.yml over SSH leaves
every host serving its instance, each with the shared per-version SGLang venv the role installed once, and the
release it serves recorded with its decode throughput (the next rollout's baseline)."""
import json


def test_every_host_serves_after_one_full_deploy(served_fleet):
    for host in served_fleet.hosts:
        url = served_fleet.base_url(host)
        res = served_fleet.session.exec(host, f"curl -s -o /dev/null -w '%{{http_code}}' {url}/health_generate")
        assert res.stdout.strip() == "200", (host, res.stdout, res.stderr)
        info = served_fleet.session.exec(host, f"curl -s {url}/server_info")
        assert str(json.loads(info.stdout)["speculative_algorithm"]).upper() == "DFLASH", host
        active = served_fleet.session.exec(host, "systemctl is-active sglang@kimi.service")
        assert active.stdout.strip() == "active", host
        releases = "/var/lib/ct200/releases/"
        st = json.loads(served_fleet.session.exec(host, "cat %sstate.json" % releases).stdout)
        record = json.loads(served_fleet.session.exec(host, "cat %s%s.json" % (releases, st["current"])).stdout)
        assert st["previous"] is None and record["measured"]["decode_tok_s"] > 30, (host, st, record["measured"])
