# SPDX-License-Identifier: Apache-2.0
"""`ct200 status` on two local hosts, each serving a stand-in: one healthy with a recorded release, one with a
planted bad drafter (standin.json accept_length 1.0) and no release. The table shows both, the bad drafter
breaks the acceptance rule, the command exits 1 and --json carries the rows. With a ct200_monitoring_host in the
inventory the acceptance length comes from Prometheus (Debian's, on loopback, scraping both)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

import models
import prometheus_bin
from conftest import kimi_params, plan, real_dialect, require_parse_venv
from test_standin import CHAT, call, free_port, start
from test_monitoring_live import api, wait

REPO = Path(__file__).resolve().parents[2]


def ct200_status(inv, summary):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "ct200_fleet", "status", "-i", str(inv), "--json", str(summary)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_status_table_flags_the_bad_drafter(tmp_path):
    python = require_parse_venv("0.5.23")
    procs, hosts = [], {}
    try:
        for name, accept in (("st-good", 3.5), ("st-bad", 1.0)):
            mdir = {"kimi": models.kimi(tmp_path / name), "kimi_draft": models.kimi_draft(tmp_path / name)}
            behaviour = {"accept_length": accept, "decode_tok_s": 41.5}
            Path(mdir["kimi_draft"], "standin.json").write_text(json.dumps(behaviour))
            port = free_port()
            _spec, _resolved, argv = plan(kimi_params(mdir, port=port), real_dialect("0.5.23"))
            procs.append(start(python, argv, port)[0])
            assert call("http://127.0.0.1:%d/v1/chat/completions" % port, CHAT)[0] == 200
            releases = tmp_path / name / "releases"
            releases.mkdir()
            hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                           "ct200_download_user": "nobody", "sglang_release_dir": str(releases),
                           "sglang_service_instances": [{"name": "kimi", "port": port, "host": "127.0.0.1",
                                                         "served_model_name": "kimi-k2.6",
                                                         "speculative": {"algorithm": "dflash"}}]}
        good = tmp_path / "st-good" / "releases"
        (good / "state.json").write_text(json.dumps({"current": "r0123456789ab", "previous": None, "keep": 2}))
        (good / "r0123456789ab.json").write_text(json.dumps({"id": "r0123456789ab", "target": {
            "repo_id": "moonshotai/Kimi-K2.6", "commit": "a" * 40, "dir": "/models/x"}}))
        inv = tmp_path / "hosts.yml"
        inv.write_text(yaml.safe_dump({"ct200": {"hosts": hosts}}))
        summary = tmp_path / "summary.json"
        proc = ct200_status(inv, summary)
        # the same fleet with Prometheus scraping it (its port in the monitoring host's variables)
        prom_port, ports = free_port(), {h: v["sglang_service_instances"][0]["port"] for h, v in hosts.items()}
        procs.append(prometheus_bin.start_prometheus(tmp_path / "prometheus", ports, prom_port))
        wait("both instances in Prometheus", lambda: len(_quiet_query(prom_port)) == 2, 60)
        hosts["st-good"]["monitoring_port"] = prom_port
        inv_prom = tmp_path / "hosts-prom.yml"
        inv_prom.write_text(yaml.safe_dump({"ct200": {"hosts": hosts, "vars": {"ct200_monitoring_host": "st-good"}}}))
        summary_prom = tmp_path / "summary-prom.json"
        proc_prom = ct200_status(inv_prom, summary_prom)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    table = out[out.index("HOST     INSTANCE"):]
    lines = {line.split()[0]: line for line in table.splitlines()[1:] if line.startswith("st-")}
    assert "r0123456789ab (aaaaaaaaaaaa)" in lines["st-good"] and "3.50" in lines["st-good"], table
    assert lines["st-good"].rstrip().endswith("ok"), table
    assert "1.00" in lines["st-bad"] and "accept length 1.00 < 2.00" in lines["st-bad"], table
    assert "RULES BROKEN: st-bad/kimi: accept length 1.00 < 2.00" in out
    data = json.loads(summary.read_text())
    rows = {r["host"]: r for r in data["instances"]}
    assert data["ok"] is False and data["instances_ok"] is False
    assert rows["st-good"]["health"] == "ok" and rows["st-good"]["decode_tok_s"] == 41.5
    assert rows["st-good"]["accept_source"] == "metrics" and rows["st-bad"]["release"] == "-"
    assert rows["st-bad"]["verdict"] == ["accept length 1.00 < 2.00"]
    assert rows["st-good"]["token_state"] == "missing" and rows["st-good"]["in_rotation"] is None

    assert proc_prom.returncode == 1, proc_prom.stdout + proc_prom.stderr
    rows = {r["host"]: r for r in json.loads(summary_prom.read_text())["instances"]}
    assert rows["st-good"]["accept_source"] == rows["st-bad"]["accept_source"] == "prometheus (5m)"
    assert (rows["st-good"]["accept_length"], rows["st-bad"]["accept_length"]) == (3.5, 1.0)


def _quiet_query(port):
    try:
        return api(port, "/api/v1/query?query=ct200:accept_length:avg5m")["result"]
    except OSError:
        return []
