# SPDX-License-Identifier: Apache-2.0
"""Unit rendering: systemd quoting, directives, env file, NUMA, peers, systemd-analyze verify."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import kimi_params, plan, qwen_ddtree_params, real_dialect
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_spec as specmod
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_unit as unit

D23 = real_dialect("0.5.23")
PR = real_dialect("0.5.23", ["--speculative-ddtree-budget"], ["DDTREE"])
ANALYZE = shutil.which("systemd-analyze")
ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "s": " "}


def systemd_split(line):
    """Reference reading of an ExecStart= value (systemd.service(5) "Command lines", systemd.syntax(7)).

    Written from the documentation, independently of the renderer: words split on
    whitespace, single/double quotes group, C escapes are resolved, "%%" -> "%"
    (specifiers), "$$" -> "$" (no expansion). Other "%x"/"$X" would be expanded
    by systemd, so they are reported as errors here.
    """
    words, i, n = [], 0, len(line)
    while i < n:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            break
        word, quote = [], None
        while i < n:
            c = line[i]
            if quote is None and c in " \t":
                break
            if c in "\"'" and (quote is None or quote == c):
                quote = None if quote == c else c
                i += 1
                continue
            if c == "\\":
                nxt = line[i + 1]
                assert nxt in ESCAPES, "unsupported escape \\%s" % nxt
                word.append(ESCAPES[nxt])
                i += 2
                continue
            if c in "%$":
                assert line[i + 1:i + 2] == c, "unescaped %s in %r" % (c, line)
                word.append(c)
                i += 2
                continue
            word.append(c)
            i += 1
        assert quote is None, "unbalanced quote"
        words.append("".join(word))
    return words


def directive(text, key):
    values = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]
    assert len(values) == 1, (key, values)
    return values[0]


@pytest.mark.parametrize("arg", [
    "/models/Kimi K2.6", "/m/it's \"q\"", "100%", "$HOME", "${X}", "a\\b", "", "--x=y z", "%i%n", "'", "\"",
    "semi;colon", "-leading-dash",
])
def test_quoting_round_trip(arg):
    line = unit.command_line(["/usr/bin/python3", arg, "next"])
    assert systemd_split(line) == ["/usr/bin/python3", arg, "next"]


@pytest.mark.parametrize("arg", ["a\nb", "tab\there", "nul\x00", ";"])
def test_quoting_refuses_what_systemd_cannot_carry(arg):
    with pytest.raises(unit.UnitError):
        unit.systemd_quote(arg)


def test_env_quoting_round_trip():
    value = 'a "b" $c `d` \\e'
    text = "K=%s\n" % unit.env_quote(value)
    assert unit.parse_env_file(text) == {"K": value}
    with pytest.raises(unit.UnitError):
        unit.env_quote("x\ny")


def test_kimi_unit_directives(mdir):
    spec, resolved, argv = plan(kimi_params(mdir, environment={"OMP_NUM_THREADS": "8"}), D23)
    text = unit.render_unit(spec, argv)
    assert systemd_split(directive(text, "ExecStart")) == argv
    expected = {"Type": "exec", "KillMode": "mixed", "Restart": "on-failure", "TimeoutStartSec": "2400",
                "TimeoutStopSec": "900", "RestartSec": "30", "StartLimitBurst": "3", "StartLimitIntervalSec": "600",
                "LimitNOFILE": "1048576", "LimitMEMLOCK": "infinity", "User": "sglang", "Group": "sglang",
                "NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
                "WantedBy": "multi-user.target"}
    for key, value in expected.items():
        assert directive(text, key) == value, key
    for key, value in {"CapabilityBoundingSet": "", "ProtectProc": "invisible", "ProtectHostname": "yes",
                       "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK", "DevicePolicy": "closed",
                       "SystemCallFilter": "@system-service pidfd_getfd",
                       "EnvironmentFile": "/etc/sglang/kimi.env"}.items():
        assert directive(text, key) == value, key
    assert "DeviceAllow=char-nvidia-frontend rw" in text and "DeviceAllow=char-nvidia-uvm rw" in text
    for forbidden in ("PrivateDevices", "MemoryDenyWriteExecute", "ProcSubset", "PrivateUsers", "ExecStartPost",
                      "hf_", "--api-key"):
        assert forbidden not in text
    env = unit.parse_env_file(unit.render_env(spec, resolved.gpus, specmod.FIXED_ENV))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["OMP_NUM_THREADS"] == "8" and env["CT200_SGLANG_PORT"] == "30000"
    assert not any("TOKEN" in key for key in env)
    assert env["PATH"].startswith("/opt/sglang/venv/bin:/usr/local/cuda/bin:")
    assert env["CUDA_HOME"] == "/usr/local/cuda"


def test_numa_binding_with_and_without_numactl(mdir):
    spec, resolved, argv = plan(qwen_ddtree_params(mdir), PR)
    with_numactl = unit.render_unit(spec, argv, numactl="/usr/bin/numactl")
    assert systemd_split(directive(with_numactl, "ExecStart"))[:3] == [
        "/usr/bin/numactl", "--cpunodebind=0", "--membind=0"]
    assert "NUMAPolicy" not in with_numactl
    native = unit.render_unit(spec, argv, numactl=None)
    assert systemd_split(directive(native, "ExecStart")) == argv
    assert directive(native, "NUMAPolicy") == "bind" and directive(native, "NUMAMask") == "0"
    env = unit.parse_env_file(unit.render_env(spec, resolved.gpus, specmod.FIXED_ENV))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and env["CT200_SGLANG_NUMA_NODE"] == "0"


def test_health_url():
    assert unit.health_url("0.0.0.0", 30000, "/health") == "http://127.0.0.1:30000/health"
    assert unit.health_url("::", 1, "/h") == "http://[::1]:1/h"
    assert unit.health_url("10.0.0.5", 2, "/h") == "http://10.0.0.5:2/h"


def test_peers_are_read_from_env_files(tmp_path, mdir):
    spec, resolved, argv = plan(qwen_ddtree_params(mdir, nccl_port=31000), PR)
    (tmp_path / "qwen-a.env").write_text(unit.render_env(spec, resolved.gpus, specmod.FIXED_ENV))
    (tmp_path / "unrelated.env").write_text("FOO=1\n")
    assert unit.read_peers(str(tmp_path), "other") == [
        {"name": "qwen-a", "gpus": [0, 1, 2, 3], "source": str(tmp_path / "qwen-a.env"), "port": 30000,
         "nccl_port": 31000}]
    assert unit.read_peers(str(tmp_path), "qwen-a") == []


def _run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze missing (apt-get install systemd)")


@needs_analyze
@pytest.mark.parametrize("profile", ["kimi", "qwen", "spaces"])
def test_rendered_units_pass_systemd_analyze_verify(mdir, tmp_path, profile):
    if profile == "kimi":
        spec, resolved, argv = plan(kimi_params(mdir, python=sys.executable), D23)
    elif profile == "qwen":
        spec, resolved, argv = plan(qwen_ddtree_params(mdir, python=sys.executable, limit_nofile="20000",
                                                       read_write_paths=["/srv/scratch"]), PR)
    else:
        import models
        odd = models.kimi(tmp_path, "dir with spaces, it's \"quoted\" 100% $HOME")
        spec, resolved, argv = plan(kimi_params(mdir, target=odd, python=sys.executable), D23)
    text = unit.render_unit(spec, argv, numactl=None)
    assert unit.verify_unit(_run, spec.unit_name, text, systemd_analyze=ANALYZE) == []


@needs_analyze
@pytest.mark.parametrize("broken, expected", [
    ("Type=exec\nTyp=exec", "Unknown key 'Typ' in section [Service], ignoring"),
    ("Type=exec\nRestart=sometimes", "Failed to parse service restart specifier"),
    ("Type=exec\nExecStart=/nonexistent/python -m x", "/nonexistent/python"),
])
def test_verify_fails_on_warnings_and_errors(mdir, broken, expected):
    spec, resolved, argv = plan(kimi_params(mdir, python=sys.executable), D23)
    text = unit.render_unit(spec, argv).replace("Type=exec", broken, 1)
    if "ExecStart=/nonexistent" in broken:
        text = "\n".join(line for line in text.splitlines() if not line.startswith('ExecStart="'))
    problems = unit.verify_unit(_run, spec.unit_name, text, systemd_analyze=ANALYZE)
    assert problems and any(expected in p for p in problems), problems


@needs_analyze
@pytest.mark.parametrize("profile", ["kimi", "qwen-numa"])
def test_hardened_unit_scores_at_most_4_5(mdir, profile):
    """systemd-analyze security --offline=true on the rendered unit (issue 7 finding 9: it was 6.4 MEDIUM)."""
    if profile == "kimi":
        spec, resolved, argv = plan(kimi_params(mdir, python=sys.executable), D23)
    else:
        spec, resolved, argv = plan(qwen_ddtree_params(mdir, python=sys.executable), PR)
    score = unit.security_score(_run, spec.unit_name, unit.render_unit(spec, argv), systemd_analyze=ANALYZE)
    assert score <= 4.5, score


@needs_analyze
def test_security_score_would_catch_the_old_unit(mdir):
    """The score check can fail: without the hardening block the same unit scores above 4.5."""
    spec, resolved, argv = plan(kimi_params(mdir, python=sys.executable), D23)
    text = "\n".join(line for line in unit.render_unit(spec, argv).splitlines() if line not in unit.HARDENING)
    assert unit.security_score(_run, spec.unit_name, text, systemd_analyze=ANALYZE) > 4.5


@pytest.mark.parametrize("field, value", [("service_user", "sglang\nExecStartPre=/bin/touch /tmp/x"),
                                          ("service_group", "sglang\nUser=root")])
def test_newline_in_user_or_group_cannot_inject_a_directive(mdir, field, value):
    with pytest.raises(specmod.SpecError) as info:
        plan(kimi_params(mdir, **{field: value}), D23)
    assert any(p.startswith("%s %r is not a POSIX user/group name" % (field, value)) for p in info.value.problems)


def test_read_existing_never_follows_a_symlink(tmp_path):
    (tmp_path / "real").write_text("secret")
    os.symlink(str(tmp_path / "real"), str(tmp_path / "link"))
    with pytest.raises(unit.NotOurs):
        unit.read_existing(str(tmp_path / "link"))
    assert unit.read_existing(str(tmp_path / "missing")) is None
    assert unit.read_existing(str(tmp_path / "real")) == "secret"


def mounts_split(value):
    """Reference reading of a RequiresMountsFor= value (systemd 252 config_parse_unit_requires_mounts_for):
    extract_first_word(EXTRACT_UNQUOTE) -- quotes group, a backslash takes the next character literally -- then
    specifier expansion ("%%" -> "%"). "$" is not special there."""
    words, i, n = [], 0, len(value)
    while i < n:
        while i < n and value[i] in " \t":
            i += 1
        if i >= n:
            break
        word, quote = [], None
        while i < n and (quote or value[i] not in " \t"):
            c = value[i]
            if c in "\"'" and (quote is None or quote == c):
                quote = None if quote == c else c
            elif c == "\\":
                i += 1
                word.append(value[i])
            elif c == "%":
                assert value[i + 1] == "%", "unescaped %% in %r" % value
                i += 1
                word.append("%")
            else:
                word.append(c)
            i += 1
        assert quote is None, "unbalanced quote"
        words.append("".join(word))
    return words


def test_boot_order_wants_the_uvm_loader_and_persistenced_when_the_host_has_them(mdir):
    """Issue 15 item 1: after a reboot /dev/nvidia-uvm must exist before CUDA starts."""
    spec, resolved, argv = plan(kimi_params(mdir), D23)
    full = unit.render_unit(spec, argv, boot=unit.BootDeps("/usr/bin/nvidia-modprobe", True, True))
    for key in ("After", "Wants"):
        assert directive(full, key) == "network-online.target ct200-nvidia-uvm.service nvidia-persistenced.service"
    bare = unit.render_unit(spec, argv, boot=unit.BootDeps())
    assert directive(bare, "After") == directive(bare, "Wants") == "network-online.target"
    assert "ExecStartPre" not in full  # the loader is a unit of its own (sglang_unit.py "Boot order")
    for text in (full, bare):
        assert mounts_split(directive(text, "RequiresMountsFor")) == [
            spec.target, spec.draft, "/opt/sglang/venv"]


def test_requires_mounts_for_carries_odd_paths(mdir, tmp_path):
    import models
    odd = models.kimi(tmp_path, "dir with spaces, it's \"quoted\" 100% $HOME \\x")
    spec, resolved, argv = plan(kimi_params(mdir, target=odd), D23)
    text = unit.render_unit(spec, argv)
    assert mounts_split(directive(text, "RequiresMountsFor")) == [odd, spec.draft, "/opt/sglang/venv"]
    with pytest.raises(unit.UnitError):
        unit.path_quote("/a\nb")


def test_uvm_loader_runs_nvidia_modprobe_as_a_root_oneshot():
    assert unit.render_uvm_loader(unit.BootDeps()) is None
    text = unit.render_uvm_loader(unit.BootDeps("/usr/bin/nvidia-modprobe", False, True))
    assert systemd_split(directive(text, "ExecStart")) == ["/usr/bin/nvidia-modprobe", "-u", "-c=0"]
    assert directive(text, "Type") == "oneshot" and directive(text, "RemainAfterExit") == "yes"
    assert "User=" not in text and "NoNewPrivileges" not in text  # it needs root: it loads a module, mknods
    assert unit.modules_load_text().splitlines()[-1] == "nvidia-uvm"


def test_detect_boot_reads_the_host(tmp_path):
    units, sysmod = tmp_path / "units", tmp_path / "sys-module-nvidia"
    units.mkdir()
    assert unit.detect_boot(lambda name: None, [str(units)], str(sysmod)) == unit.BootDeps(None, False, False)
    (units / "nvidia-persistenced.service").write_text("[Service]\nExecStart=/bin/true\n")
    sysmod.mkdir()
    assert unit.detect_boot(lambda name: None, [str(units)], str(sysmod)) == unit.BootDeps(None, True, True)
    found = unit.detect_boot({"nvidia-modprobe": "/usr/bin/nvidia-modprobe"}.get, [str(tmp_path)], str(units / "x"))
    assert found == unit.BootDeps("/usr/bin/nvidia-modprobe", False, True)
    assert found.units() == ["ct200-nvidia-uvm.service"]


@needs_analyze
def test_boot_units_pass_systemd_analyze_verify(mdir, tmp_path):
    modprobe = tmp_path / "nvidia-modprobe"
    modprobe.write_text("#!/bin/sh\nexit 0\n")
    modprobe.chmod(0o755)
    boot = unit.BootDeps(str(modprobe), True, True)
    spec, resolved, argv = plan(kimi_params(mdir, python=sys.executable), D23)
    assert unit.verify_unit(_run, spec.unit_name, unit.render_unit(spec, argv, boot=boot), ANALYZE) == []
    assert unit.verify_unit(_run, unit.UVM_LOADER_UNIT, unit.render_uvm_loader(boot), ANALYZE) == []
    score = unit.security_score(_run, spec.unit_name, unit.render_unit(spec, argv, boot=boot), ANALYZE)
    assert score <= 4.5, score
