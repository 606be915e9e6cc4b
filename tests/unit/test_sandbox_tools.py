"""Unit tests of the sandbox fleet helpers (no hosts booted).

scripts/sandbox.py (argument checks, cgroup layout, nspawn command line) and
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


def _load_sandbox():
    spec = importlib.util.spec_from_file_location("ct200_sandbox", REPO / "scripts" / "sandbox.py")
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
    res = subprocess.run([str(REPO / "scripts" / "sandbox.sh"), "status", "--state",
                          str(tmp_path / "none.json")], capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 3
    assert "sandbox is not running" in res.stdout and "scripts/sandbox.sh up N" in res.stdout


def test_scripts_are_valid_bash():
    for name in ("sandbox.sh", "build-rootfs.sh"):
        subprocess.run(["bash", "-n", str(REPO / "scripts" / name)], check=True, timeout=30)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
