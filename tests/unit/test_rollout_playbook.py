# SPDX-License-Identifier: Apache-2.0
"""playbooks/rollout.yml and rollback.yml as written (the fleet tests prove them running), and their CLI."""
from pathlib import Path

import yaml

from ct200_fleet import cli

REPO = Path(__file__).resolve().parents[2]


def plays(name):
    return yaml.safe_load((REPO / "playbooks" / name).read_text())


def tasks_of(play):
    out = []
    for task in play.get("tasks", []):
        out.append(task)
        for key in ("block", "rescue", "always"):
            out.extend(task.get(key, []))
    return out


def test_stage_then_a_gated_switch_in_batches_then_gc():
    preflight, stage, switch, gc = plays("rollout.yml")
    assert preflight["ansible.builtin.import_playbook"] == "preflight.yml"
    assert "serial" not in stage and switch["serial"] == "{{ ct200_rollout_serial | default([1, '25%']) }}"
    assert switch["max_fail_percentage"] == 0
    # nothing restarts while staging: no unit is started/restarted by a task of the stage play
    stage_modules = {k for task in tasks_of(stage) for k in task if "." in k}
    assert not stage_modules & {"ansible.builtin.systemd_service", "ansible.builtin.systemd", "ansible.builtin.service"}
    block = next(task for task in switch["tasks"] if "block" in task)
    names = [next(k for k in task if "." in k) for task in block["block"]]
    assert names[0] == "ansible.builtin.include_role" and block["block"][0]["ansible.builtin.include_role"]["name"] \
        == "ct200.deploy.sglang_service"  # the role's run path (instance_run.yml: drain, start, readiness)
    assert names.index("ct200.deploy.sglang_gate") < names.index("ansible.builtin.assert") \
        < [i for i, n in enumerate(names) if n == "ct200.deploy.sglang_release"][-1]
    # the switch skips the role's install phase; a bare host (no unit yet) gets it in the stage play instead
    assert block["block"][0]["vars"]["sglang_service_install_phase"] is False
    install = next(t for t in tasks_of(stage) if (t.get("ansible.builtin.include_role") or {}).get("tasks_from")
                   == "install.yml")
    assert install["when"] == "not ct200_rollout_unit_stat.stat.exists"
    # the rollout names the gate from what the role's run path kept, read before the restore's run path resets it
    assert "ct200_rollout_role_failure" in block["rescue"][0]["ansible.builtin.set_fact"]
    rescue = [next(k for k in task if "." in k) for task in block["rescue"]]
    restore = block["rescue"][rescue.index("ct200.deploy.sglang_release")]["ct200.deploy.sglang_release"]
    assert restore["state"] == "restored" and restore["to"] == "current"
    run = block["rescue"][rescue.index("ansible.builtin.include_role")]["ansible.builtin.include_role"]
    assert run == {"name": "ct200.deploy.sglang_service", "tasks_from": "run.yml"}
    assert rescue[-1] == "ansible.builtin.fail"
    assert "rollout_failure" in block["rescue"][-1]["ansible.builtin.fail"]["msg"]
    # GC only after every host of the rollout passed
    gc_task = gc["tasks"][0]
    assert any("ct200_rollout_done" in cond for cond in gc_task["when"])
    for play in plays("rollout.yml")[1:] + plays("rollback.yml"):
        for task in tasks_of(play):
            for key, value in task.items():
                if key in ("ansible.builtin.systemd_service", "ansible.builtin.systemd"):
                    assert set(value) == {"daemon_reload"}, task  # restarts only through the role's run path
                    assert "ansible.builtin.command" not in task


def test_rollback_restores_the_previous_release_through_the_run_path():
    (play,) = plays("rollback.yml")
    assert play["max_fail_percentage"] == 0 and "ct200_rollout_serial" in play["serial"]
    mods = [next(k for k in task if "." in k) for task in play["tasks"]]
    restore = play["tasks"][mods.index("ct200.deploy.sglang_release")]["ct200.deploy.sglang_release"]
    assert restore["state"] == "restored" and restore["to"] == "previous"
    assert play["tasks"][-1]["ansible.builtin.include_role"] == {"name": "ct200.deploy.sglang_service",
                                                                 "tasks_from": "run.yml"}


def test_the_cli_runs_them_with_the_batches_as_ct200_rollout_serial():
    parser = cli.build_parser()
    args = parser.parse_args(["rollout", "-i", "inv", "--batches", "1,50%"])
    assert cli.main_extravars(args) == {"ct200_rollout_serial": [1, "50%"]}
    assert cli.PLAYBOOKS["rollout"].endswith("playbooks/rollout.yml")
    args = parser.parse_args(["rollback", "-i", "inv", "--limit", "fleet-3"])
    assert args.limit == "fleet-3" and cli.main_extravars(args) == {}
    assert cli.PLAYBOOKS["rollback"].endswith("playbooks/rollback.yml")
    assert cli.main_extravars(parser.parse_args(["rotate-token", "-i", "inv", "--token-stdin", "--batches", "2"])) \
        == {"rotate_serial": [2]}


# the role's task files that never stop or start an instance (rollout.yml's stage play installs through one)
NO_RESTART_TASK_FILES = ("install.yml", "preflight.yml")


def _runs_the_service_role(task) -> bool:
    for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
        include = task.get(key) or {}
        if include.get("name") == "ct200.deploy.sglang_service" and include.get("tasks_from") not in NO_RESTART_TASK_FILES:
            return True
    return any(_runs_the_service_role(t) for k in ("block", "rescue", "always") for t in task.get(k, []))


def test_every_play_that_restarts_an_instance_drains_it():
    """Issue 14 item 2: the role's run path drains through vars/traffic.yml's sglang_service_traffic*; a play that
    runs the role without that file stops and restarts instances behind the router's back (rollout and rollback
    did: sglang_service_traffic stayed at the role's default none)."""
    checked = []
    for path in sorted((REPO / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            if not isinstance(play, dict) or "hosts" not in play:
                continue
            runs = any(_runs_the_service_role(t) for t in play.get("tasks", [])) or any(
                (r if isinstance(r, str) else r.get("role")) == "ct200.deploy.sglang_service" for r in play.get("roles", []))
            if runs:
                checked.append("%s: %s" % (path.name, play.get("name")))
                assert "vars/traffic.yml" in play.get("vars_files", []), checked[-1]
    assert any(c.startswith("rollout.yml") for c in checked) and any(c.startswith("rollback.yml") for c in checked)
    assert any(c.startswith("restart.yml") for c in checked) and any(c.startswith("deploy_kimi.yml") for c in checked)


def test_the_gates_reach_the_instance_where_it_listens(tmp_path):
    """The rollout's gates and baseline run on the host at ct200_rollout_base_url: 127.0.0.1 for an instance on
    loopback or a wildcard, the listen address otherwise (behind a router an instance listens on the host's
    address with an API key; a fixed 127.0.0.1 found nothing there)."""
    import json
    import os
    import subprocess
    import sys

    bin_dir = Path(sys.executable).parent
    got = {}
    for listen in ("127.0.0.1", "0.0.0.0", "10.200.3.7"):
        extra = tmp_path / ("%s.json" % listen)
        extra.write_text(json.dumps({"ct200_kimi_instance": {"name": "kimi", "port": 30004, "host": listen}}))
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_INVENTORY_UNPARSED_FAILED="false", PATH=str(bin_dir) + os.pathsep + os.environ["PATH"])
        proc = subprocess.run([str(bin_dir / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m", "debug",
                               "-a", "var=ct200_rollout_base_url", "-e", "@%s" % (REPO / "playbooks" / "vars" / "rollout.yml"),
                               "-e", "@%s" % extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got[listen] = proc.stdout
    assert "http://127.0.0.1:30004" in got["127.0.0.1"] and "http://127.0.0.1:30004" in got["0.0.0.0"]
    assert "http://10.200.3.7:30004" in got["10.200.3.7"], got


def test_a_switched_host_rejoins_client_traffic_only_after_the_release_gates():
    """The role's run path puts an instance back after its own readiness (health, smoke, drafter); the rollout's
    gates (throughput, acceptance floor) come after it. The switch keeps the instance out (rejoin false) and puts it
    back after the gates passed and the release was recorded; a failing host rejoins through the rescue's run path,
    on its previous release."""
    _preflight, _stage, switch, _gc = plays("rollout.yml")
    block = next(task for task in switch["tasks"] if "block" in task)
    steps = block["block"]
    switch_step = steps[0]
    assert switch_step["vars"]["sglang_service_traffic_rejoin"] is False
    mods = [next(k for k in task if "." in k) for task in steps]
    back = next(i for i, t in enumerate(steps) if (t.get("ansible.builtin.include_role") or {}).get("tasks_from")
                == "instance_traffic.yml")
    assert steps[back]["vars"]["sglang_service_traffic_state"] == "in"
    assert mods.index("ansible.builtin.assert") < back
    assert max(i for i, m in enumerate(mods) if m == "ct200.deploy.sglang_release") < back
    rescue_run = [t for t in block["rescue"] if "ansible.builtin.include_role" in t]
    assert all("sglang_service_traffic_rejoin" not in (t.get("vars") or {}) for t in rescue_run)
    role_run = yaml.safe_load((REPO / "roles" / "sglang_service" / "tasks" / "instance_run.yml").read_text())
    rejoin = next(t for t in role_run if t.get("name", "").startswith("Run | back in rotation"))
    assert "sglang_service_traffic_rejoin | bool" in rejoin["when"]
