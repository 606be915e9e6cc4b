# SPDX-License-Identifier: Apache-2.0
"""The SSH fleet itself: 8 hosts in their own network namespaces, reached over
SSH as in production, a Hub in a namespace of its own, shaped links, and a host
whose sshd is stopped reported UNREACHABLE by Ansible."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import threading

import pytest

pytestmark = pytest.mark.slow

PY_CONNECT = ("import socket,sys\n"
              "s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)\n"
              "print('connected')\n")


def host_python(fleet, host, script, *args):
    """Run a short Python script on HOST over SSH."""
    return fleet.ssh(host, "python3 - " + " ".join(args), input=script)


def test_every_host_answers_ping_over_ssh(ssh_fleet):
    assert len(ssh_fleet.hosts) >= 8 and all(h.startswith("fleet-") or os.environ.get("CT200_FLEET_PREFIX")
                                             for h in ssh_fleet.hosts)
    run = ssh_fleet.ansible("ct200", "ansible.builtin.ping", None, "-vvv")
    assert run.rc == 0, run.out[-3000:]
    for host in ssh_fleet.hosts:
        assert re.search(rf"^{host} \| SUCCESS", run.out, re.M), host
        # The ssh connection plugin, to the host's own address, as root.
        assert f"<{ssh_fleet.addresses[host]}> ESTABLISH SSH CONNECTION FOR USER: root" in run.out, host
    assert "ESTABLISH NSENTER" not in run.out.upper()


def test_modules_run_inside_an_ssh_session(ssh_fleet):
    """SSH_CONNECTION is set by sshd only: proof that the module came over SSH,
    from the bridge address of the controller to the host's own address."""
    run = ssh_fleet.ansible("ct200", "ansible.builtin.command", "printenv SSH_CONNECTION")
    assert run.rc == 0, run.out[-3000:]
    gateway = ssh_fleet.fleet.network["gateway"]
    for host, addr in ssh_fleet.addresses.items():
        assert re.search(rf"^{host} \| CHANGED \| rc=0 >>\n{re.escape(gateway)} \d+ {re.escape(addr)} 22$",
                         run.out, re.M), (host, run.out[-2000:])


def test_each_host_has_its_own_network_namespace(ssh_fleet):
    fleet = ssh_fleet.fleet
    inodes = {h: os.stat(f"/proc/{fleet.host(h)['leader_pid']}/ns/net").st_ino for h in ssh_fleet.hosts}
    assert len(set(inodes.values())) == len(inodes)
    assert os.stat("/proc/self/ns/net").st_ino not in inodes.values()
    for host in ssh_fleet.hosts:
        out = ssh_fleet.ssh(host, "ip -4 -o addr show dev eth0")
        assert out.returncode == 0, out.stderr
        assert f"inet {ssh_fleet.addresses[host]}/24" in out.stdout


def test_hosts_reach_each_other_but_not_the_controller_loopback(ssh_fleet):
    first, last = ssh_fleet.hosts[0], ssh_fleet.hosts[-1]
    res = host_python(ssh_fleet, first, PY_CONNECT, ssh_fleet.addresses[last], "22")
    assert res.returncode == 0 and "connected" in res.stdout, res.stderr
    by_name = host_python(ssh_fleet, first, PY_CONNECT, last, "22")  # /etc/hosts
    assert by_name.returncode == 0, by_name.stderr

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    try:
        # The same probe reaches the controller's loopback from the machine itself...
        local = subprocess.run(["python3", "-c", PY_CONNECT, "127.0.0.1", str(port)], capture_output=True,
                               text=True, timeout=30, check=False)
        assert local.returncode == 0
        # ...but from a host, 127.0.0.1 is the host's own loopback.
        res = host_python(ssh_fleet, first, PY_CONNECT, "127.0.0.1", str(port))
        assert res.returncode != 0 and "ConnectionRefusedError" in res.stderr, res.stdout + res.stderr
    finally:
        server.close()


def test_hub_is_reachable_from_every_host(ssh_fleet):
    hub = ssh_fleet.hub
    ssh_fleet.hub_reset()
    url = f"{ssh_fleet.hub_url}/api/models/moonshotai/Kimi-K2.6"
    run = ssh_fleet.ansible("ct200", "ansible.builtin.uri", f"url={url} return_content=false")
    assert run.rc == 0, run.out[-3000:]
    assert ssh_fleet.hub_stats()["model_info"] == len(ssh_fleet.hosts)
    # LFS bytes come from the CDN origin (the Hub namespace's second address).
    shard = next(p for p in hub.repo("moonshotai/Kimi-K2.6").files if p.endswith(".safetensors"))
    host = ssh_fleet.hosts[0]
    res = ssh_fleet.ssh(host, f"curl -fsSL -o /dev/null -w '%{{url_effective}} %{{size_download}}' "
                              f"{ssh_fleet.hub_url}/moonshotai/Kimi-K2.6/resolve/main/{shard}")
    assert res.returncode == 0, res.stderr
    effective, size = res.stdout.split()
    assert effective.startswith(f"http://{ssh_fleet.fleet.hub_cdn_address}:")
    assert int(size) == hub.repo("moonshotai/Kimi-K2.6").files[shard].size
    assert ssh_fleet.hub_stats()["cdn_bytes_sent"] >= int(size)


def test_links_are_shaped_with_tbf(ssh_fleet):
    net = ssh_fleet.fleet.network
    rate = {"1gbit": "1Gbit"}.get(net["link_rate"], None)
    for host, spec in net["hosts"].items():
        outside = subprocess.run(["tc", "qdisc", "show", "dev", spec["veth"]], capture_output=True,
                                 text=True, timeout=30, check=True).stdout
        inside = subprocess.run(["tc", "-n", spec["netns"], "qdisc", "show", "dev", "eth0"],
                                capture_output=True, text=True, timeout=30, check=True).stdout
        for out in (outside, inside):
            assert "qdisc tbf" in out, (host, out)
            if rate:
                assert f"rate {rate}" in out, (host, out)
    hub = net["hub"]
    hub_out = subprocess.run(["tc", "-n", hub["netns"], "qdisc", "show", "dev", "eth0"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    assert "qdisc tbf" in hub_out
    assert hub["rate"] and hub["rate"] != net["link_rate"]


def test_stopped_sshd_makes_the_host_unreachable_and_start_recovers(ssh_fleet):
    host = ssh_fleet.hosts[-1]
    warm = ssh_fleet.ansible(host, "ansible.builtin.ping")  # leaves a ControlPersist master behind
    assert warm.rc == 0, warm.out[-2000:]
    try:
        ssh_fleet.stop_sshd(host)
        run = ssh_fleet.ansible(host, "ansible.builtin.ping")
        assert run.rc != 0
        assert re.search(rf"^{host} \| UNREACHABLE!", run.out, re.M), run.out[-2000:]
    finally:
        ssh_fleet.start_sshd(host)
    again = ssh_fleet.ansible(host, "ansible.builtin.ping")
    assert again.rc == 0 and f"{host} | SUCCESS" in again.out, again.out[-2000:]
