# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the sandbox fleet helpers (no hosts booted).

tests/support/sandbox/sandbox.py (argument checks, cgroup layout, nspawn command line) and
the clean-environment wrapping of the ct200.sandbox.nsenter connection plugin.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.ct200.sandbox.plugins.connection import nsenter as conn

REPO = Path(__file__).resolve().parents[2]
SANDBOX_DIR = REPO / "tests" / "support" / "sandbox"


def _load_sandbox():
    spec = importlib.util.spec_from_file_location("ct200_sandbox", SANDBOX_DIR / "sandbox.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sandbox = _load_sandbox()


# ------------------------------------------------------- connection plugin --

HOST_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def test_wrap_string_command_starts_with_empty_environment():
    cmd = "/bin/sh -c 'echo ~ && sleep 0'"
    wrapped = conn.wrap_command(cmd, HOST_PATH)
    assert wrapped == f"env -i PATH={HOST_PATH} LANG=C.UTF-8 HOME=/root {cmd}"


def test_wrap_bytes_and_argv_commands():
    assert conn.wrap_command(b"/bin/sh -c true", HOST_PATH).startswith(b"env -i PATH=")
    assert conn.wrap_command(["tee", "/tmp/x"], HOST_PATH) == [
        "env", "-i", f"PATH={HOST_PATH}", "LANG=C.UTF-8", "HOME=/root", "tee", "/tmp/x"]


def test_wrapped_command_really_drops_the_callers_environment():
    # Run the wrapped string through a real shell, as the plugin does after nsenter.
    wrapped = conn.wrap_command("/bin/sh -c env", HOST_PATH)
    env = dict(os.environ, HF_TOKEN="must-not-leak", CT200_PROBE="1")
    out = subprocess.run(wrapped, shell=True, env=env, capture_output=True, text=True, check=True).stdout
    assert "must-not-leak" not in out and "CT200_PROBE" not in out
    assert f"PATH={HOST_PATH}" in out.splitlines()


@pytest.mark.parametrize("bad", ["", "/usr/bin;rm -rf /", "/usr/bin $(id)", "/a b"])
def test_host_path_rejects_shell_metacharacters(bad):
    with pytest.raises(ValueError, match="may contain only"):
        conn.check_host_path(bad)


def test_plugin_documents_the_upstream_option_names():
    import yaml

    doc = yaml.safe_load(conn.DOCUMENTATION)
    assert doc["options"]["nsenter_pid"]["vars"] == [{"name": "ansible_nsenter_pid"}]
    assert conn.Connection.transport == "ct200.sandbox.nsenter"
    assert conn.Connection.has_pipelining is True


# ------------------------------------------------------------- sandbox.py --

def test_parse_bind_modes(tmp_path):
    assert sandbox.parse_bind(f"{tmp_path}:/srv/wheelhouse:ro") == {
        "src": str(tmp_path), "dst": "/srv/wheelhouse", "mode": "ro"}
    assert sandbox.parse_bind(f"{tmp_path}:/srv/x")["mode"] == "rw"


@pytest.mark.parametrize("spec, msg", [
    ("relative:/dst", "absolute"),
    ("/nonexistent-ct200-src:/dst", "does not exist"),
    ("/tmp:/dst:rx", "expected SRC:DST"),
    ("/tmp", "expected SRC:DST"),
])
def test_parse_bind_errors_name_the_fix(spec, msg):
    with pytest.raises(sandbox.SandboxError, match=msg) as exc:
        sandbox.parse_bind(spec)
    assert exc.value.code == 2


def test_nspawn_command_line():
    argv = sandbox.nspawn_argv("/r", "h1", [{"src": "/w", "dst": "/srv/w", "mode": "ro"},
                                            {"src": "/v", "dst": "/opt/v", "mode": "rw"}])
    assert argv[:3] == ["systemd-nspawn", "-D", "/r"]
    for flag in ("--boot", "--register=no", "--keep-unit", "--volatile=overlay",
                 "--machine=h1", "--hostname=h1", "--console=passive",
                 "--bind-ro=/w:/srv/w", "--bind=/v:/opt/v"):
        assert flag in argv
    assert not any(a.startswith("--network") or a.startswith("--private-network") for a in argv)


def test_cgroup_layouts(tmp_path):
    hybrid = tmp_path / "hybrid"
    (hybrid / "systemd").mkdir(parents=True)
    (hybrid / "systemd" / "cgroup.procs").write_text("")
    (hybrid / "unified").mkdir()
    (hybrid / "unified" / "cgroup.controllers").write_text("")
    assert sandbox.cgroup_bases(hybrid) == [hybrid / "systemd" / "ct200lab",
                                            hybrid / "unified" / "ct200lab"]
    unified = tmp_path / "unified2"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("")
    assert sandbox.cgroup_bases(unified) == [unified / "ct200lab"]
    with pytest.raises(sandbox.SandboxError, match="no usable cgroup hierarchy"):
        sandbox.cgroup_bases(tmp_path / "empty")


def test_pid_reuse_guard_rejects_unrelated_process():
    # Our own PID is alive but is not a systemd-nspawn for that machine.
    assert sandbox.proc_alive(os.getpid())
    assert not sandbox.is_our_nspawn(os.getpid(), "ct200-h1")
    assert not sandbox.proc_alive(None)


@pytest.mark.parametrize("argv, msg", [
    (["up", "0", "--state", "/tmp/ct200-unit-state.json"], "between 1 and"),
    (["up", "2", "--name", "Bad_Name", "--state", "/tmp/ct200-unit-state.json"], "is invalid"),
    (["up", "3", "--names", "a-1,a-2", "--state", "/tmp/ct200-unit-state.json"], "lists 2"),
])
def test_up_rejects_bad_arguments_before_touching_anything(argv, msg, capsys, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("argument checks run after the root check")
    rc = sandbox.main(argv[:-1] + [str(tmp_path / "state.json")])
    assert rc == 2
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "state.json").exists()


def test_status_without_state_says_how_to_start(tmp_path):
    res = subprocess.run([str(SANDBOX_DIR / "sandbox.sh"), "status", "--state",
                          str(tmp_path / "none.json")], capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 3
    assert "sandbox is not running" in res.stdout and "tests/support/sandbox/sandbox.sh up N" in res.stdout


def test_scripts_are_valid_bash():
    for name in ("sandbox.sh", "build-rootfs.sh"):
        subprocess.run(["bash", "-n", str(SANDBOX_DIR / name)], check=True, timeout=30)


# ------------------------------------------------------- --netns (SSH fleet) --

def _load_inventory():
    spec = importlib.util.spec_from_file_location("ct200_fleet_inv", REPO / "inventories" / "sandbox" / "fleet.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _plan(tmp_path, names=("fleet-1", "fleet-2"), hub=True):
    import ipaddress
    return sandbox.net_plan(tmp_path / "state.json", list(names), ipaddress.ip_network("10.200.7.0/24"),
                            "100mbit", hub, "40mbit" if hub else None)


def test_net_plan_addresses_and_interface_names(tmp_path):
    plan = _plan(tmp_path)
    assert plan["gateway"] == "10.200.7.1"
    assert [h["address"] for h in plan["hosts"].values()] == ["10.200.7.11", "10.200.7.12"]
    assert (plan["hub"]["address"], plan["hub"]["cdn_address"]) == ("10.200.7.2", "10.200.7.3")
    links = [plan["bridge"], plan["hub"]["veth"], *(h["veth"] for h in plan["hosts"].values())]
    assert len(set(links)) == len(links) and all(len(n) <= 15 for n in links)  # IFNAMSIZ
    assert sandbox.plan_namespaces(plan) == ["fleet-1", "fleet-2", plan["hub"]["netns"]]
    # Another state file, other interface names: two fleets never share a bridge.
    assert sandbox.net_plan(tmp_path / "other.json", ["a-1"], __import__("ipaddress").ip_network(
        "10.200.8.0/24"), None, False, None)["bridge"] != plan["bridge"]


def test_nspawn_command_line_in_a_network_namespace(tmp_path):
    plan = _plan(tmp_path)
    argv = sandbox.nspawn_argv("/r", "fleet-2", [], plan)
    assert "--network-namespace-path=/run/netns/fleet-2" in argv
    assert f"--bind-ro={plan['ssh_key']}.pub:/root/.ssh/authorized_keys" in argv
    assert any(a.endswith("/hosts/fleet-2/ssh_host_ed25519_key:/etc/ssh/ssh_host_ed25519_key") for a in argv)
    assert argv[-1] == "systemd.wants=ssh.service"  # init argument, after every nspawn option


@pytest.mark.parametrize("rate", ["100mbit", "40mbit", "500kbit", "1gbit"])
def test_tc_rates(rate):
    args = sandbox.tbf_args(sandbox.parse_rate(rate, "--link-rate"))
    assert args[:4] == ["root", "tbf", "rate", rate] and int(args[5]) >= 32 * 1024


@pytest.mark.parametrize("bad", ["100", "fast", "100 mbit", "0mbit", "100mbps;reboot"])
def test_tc_rate_errors_name_the_fix(bad):
    with pytest.raises(sandbox.SandboxError, match="give a tc rate such as 100mbit") as exc:
        sandbox.parse_rate(bad, "--link-rate")
    assert exc.value.code == 2


def test_subnet_choice_skips_networks_in_use(monkeypatch):
    import ipaddress
    used = [ipaddress.ip_network("10.200.0.0/24"), ipaddress.ip_network("10.200.1.0/24")]
    monkeypatch.setattr(sandbox, "used_networks", lambda: used)
    assert str(sandbox.pick_subnet(None)) == "10.200.2.0/24"
    assert str(sandbox.pick_subnet("10.200.9.0/24")) == "10.200.9.0/24"
    for requested, msg in (("10.200.1.0/24", "already in use"), ("10.200.9.0/16", "/24"),
                           ("10.200.9.1/24", "host bits")):
        with pytest.raises(sandbox.SandboxError, match=msg):
            sandbox.pick_subnet(requested)


def test_network_options_need_netns(capsys, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("argument checks run after the root check")
    rootfs = os.environ.get("CT200_SANDBOX_ROOTFS", "/var/lib/ct200-sandbox/rootfs")
    if not os.access(os.path.join(rootfs, "lib/systemd/systemd"), os.X_OK):
        pytest.skip("no rootfs: the rootfs check comes first")
    rc = sandbox.main(["up", "2", "--link-rate", "100mbit", "--state", str(tmp_path / "s.json")])
    assert rc == 2 and "--link-rate need --netns" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


def test_ssh_material_known_hosts_and_config(tmp_path):
    plan = _plan(tmp_path)
    sandbox.make_ssh_material(plan)
    known = Path(plan["known_hosts"]).read_text().splitlines()
    assert [line.split()[0] for line in known] == ["fleet-1,10.200.7.11", "fleet-2,10.200.7.12"]
    host_keys = {line.split()[2] for line in known}
    assert len(host_keys) == 2  # one key per host
    assert oct(os.stat(plan["ssh_key"]).st_mode & 0o777) == "0o600"
    config = Path(plan["ssh_config"]).read_text()
    assert "StrictHostKeyChecking yes" in config and f"UserKnownHostsFile {plan['known_hosts']}" in config
    hosts_file = sandbox.etc_hosts(plan)
    assert "10.200.7.12\tfleet-2" in hosts_file and "10.200.7.2\tct200-hub" in hosts_file


def test_inventory_uses_ssh_for_netns_hosts(tmp_path):
    inv_mod = _load_inventory()
    plan = _plan(tmp_path)
    hosts = [{"name": n, "index": i, "leader_pid": 4242, **plan["hosts"][n]}
             for i, n in enumerate(plan["hosts"], 1)]
    inv = inv_mod.inventory(hosts, {"network": plan})
    group = inv["ct200"]["vars"]
    assert group["ansible_connection"] == "ssh" and group["ansible_user"] == "root"
    assert group["ansible_ssh_private_key_file"] == plan["ssh_key"]
    assert f"UserKnownHostsFile={plan['known_hosts']}" in group["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in group["ansible_ssh_common_args"]
    assert group["ansible_host_key_checking"] is True and group["ansible_ssh_pipelining"] is True
    assert group["ansible_control_path_dir"] == plan["control_path_dir"]
    assert group["ct200_sandbox_hub_address"] == "10.200.7.2"
    assert inv["_meta"]["hostvars"]["fleet-2"] == {"ansible_host": "10.200.7.12", "ct200_sandbox_index": 2}
    # Shared-namespace state: unchanged nsenter inventory.
    shared = inv_mod.inventory(hosts, {"network": {"mode": "shared"}})
    assert shared["ct200"]["vars"]["ansible_connection"] == "ct200.sandbox.nsenter"
    assert shared["_meta"]["hostvars"]["fleet-1"] == {"ansible_nsenter_pid": 4242, "ct200_sandbox_index": 1}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_inotify_limits_raised_never_lowered(tmp_path):
    (tmp_path / "max_user_instances").write_text("128\n")
    (tmp_path / "max_user_watches").write_text("999999999\n")
    raised = sandbox.ensure_inotify_limits(tmp_path)
    assert raised == ["max_user_instances 128 -> 8192"]
    assert (tmp_path / "max_user_instances").read_text() == "8192"
    assert (tmp_path / "max_user_watches").read_text().strip() == "999999999"


def _tiny_deb(tmp_path, size=4 << 20):
    """A real .deb whose one file is a SIZE-byte executable script (large enough that unpacking it is not instant)."""
    tree = tmp_path / "pkg"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text("Package: ct200-tiny\nVersion: 1\nArchitecture: all\n"
                                             "Maintainer: tests <t@example.invalid>\nDescription: tiny\n")
    (tree / "usr" / "bin").mkdir(parents=True)
    tool = tree / "usr" / "bin" / "tiny"
    tool.write_text("#!/bin/sh\necho whole\n" + "#" * size + "\n")
    tool.chmod(0o755)
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Znone", "--build", str(tree), str(tmp_path / "tiny.deb")],
                   check=True, capture_output=True)
    return str(tmp_path / "tiny.deb")


def test_debroot_never_shows_a_half_unpacked_root(tmp_path):
    """Six processes ask for the same fresh root at once (as xdist workers ask for promtool or nginx): each
    runs the binary it is given, none sees ETXTBSY or a short file, and no private directory is left."""
    deb = _tiny_deb(tmp_path)
    root = tmp_path / "cache" / "tiny-root"
    code = ("import subprocess, sys; sys.path.insert(0, %r); import debroot; "
            "r = debroot.unpacked(%r, [%r]); "
            "print(subprocess.run([r + '/usr/bin/tiny'], capture_output=True, text=True, check=True).stdout, end='')"
            % (str(REPO / "tests" / "support"), str(root), deb))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for attempt in range(6)]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 6, outputs
    assert [stdout for stdout, stderr in outputs] == ["whole\n"] * 6, outputs
    assert sorted(os.listdir(root.parent)) == ["tiny-root", "tiny-root.lock"]
