# SPDX-License-Identifier: Apache-2.0
"""Topology, source order, listing validation and the wait-for-a-peer logic (no network)."""

import math

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import fanout
from fakeclock import FakeClock

HOSTS = ["a", "b", "c", "d", "e", "f", "g", "h"]


def test_chain_parent_is_the_previous_host():
    tree = fanout.topology(HOSTS, fanout=1)
    assert [tree[h]["parent"] for h in HOSTS] == [None, "a", "b", "c", "d", "e", "f", "g"]
    assert tree["h"]["depth"] == 7


def test_binary_tree_has_depth_log2():
    tree = fanout.topology(HOSTS, fanout=2)
    assert tree["a"]["children"] == ["b", "c"]
    assert tree["b"]["children"] == ["d", "e"]
    assert tree["h"]["parent"] == "d"
    assert max(node["depth"] for node in tree.values()) == 3


def test_seed_with_one_child_then_binary_keeps_depth_3_for_8_hosts():
    tree = fanout.topology(HOSTS, fanout=2, seed_fanout=1)
    assert tree["a"]["children"] == ["b"]
    assert tree["b"]["children"] == ["c", "d"] and tree["c"]["children"] == ["e", "f"]
    assert tree["d"]["children"] == ["g", "h"]
    assert max(node["depth"] for node in tree.values()) == 3
    assert fanout.topology(HOSTS, fanout=2, seed_fanout=2) == fanout.topology(HOSTS, fanout=2)
    order = fanout.source_order(HOSTS, "c", fanout=2, seed_fanout=1)
    assert order[0] == ("parent", "b") and order[-1] == ("seed", "a")


def test_star_is_fanout_n_minus_1():
    tree = fanout.topology(HOSTS, fanout=7)
    assert tree["a"]["children"] == HOSTS[1:]


def test_seed_from_inventory_moves_first():
    tree = fanout.topology(HOSTS, seed="e", fanout=1)
    assert tree["e"]["index"] == 0 and tree["a"]["parent"] == "e" and tree["b"]["parent"] == "a"


def test_sources_parent_then_ancestors_then_other_peers_then_seed():
    order = fanout.source_order(HOSTS, "h", fanout=2)
    assert order[0] == ("parent", "d")
    assert order[1] == ("peer", "b")  # grandparent before the rest
    assert order[-1] == ("seed", "a")
    assert ("peer", "h") not in order and len(order) == 7


def test_child_of_the_seed_waits_on_the_seed():
    assert fanout.source_order(HOSTS, "b", fanout=2)[0] == ("seed", "a")
    assert fanout.source_order(HOSTS, "a", fanout=2) == []


@pytest.mark.parametrize("bad", [0, -1, "2", None])
def test_bad_fanout_is_refused_with_the_fix(bad):
    with pytest.raises(fanout.FanoutError) as err:
        fanout.topology(HOSTS, fanout=bad)
    assert "chain" in err.value.fix


def test_unknown_seed_is_refused():
    with pytest.raises(fanout.FanoutError, match="seed 'z'"):
        fanout.topology(HOSTS, seed="z")


GOOD = {"model-1.safetensors": {"size": 3, "oid": "a" * 64, "lfs": True},
        "config.json": {"size": 2, "oid": "b" * 40, "lfs": False}}


def test_listing_accepts_the_hub_shape():
    assert fanout.validate_listing(GOOD) == GOOD


@pytest.mark.parametrize("path,info", [
    ("../etc/passwd", {"size": 1, "oid": "a" * 64, "lfs": True}),
    ("/abs", {"size": 1, "oid": "a" * 64, "lfs": True}),
    (".ct200/manifest.json", {"size": 1, "oid": "a" * 64, "lfs": True}),
    ("sub/.hidden", {"size": 1, "oid": "a" * 64, "lfs": True}),
    ("x.safetensors", {"size": -1, "oid": "a" * 64, "lfs": True}),
    ("x.safetensors", {"size": 1, "oid": "A" * 64, "lfs": True}),
    ("x.safetensors", {"size": 1, "oid": "a" * 40, "lfs": True}),
    ("x.json", {"size": 1, "oid": "*" * 40, "lfs": False}),
])
def test_listing_refuses_unsafe_or_malformed_entries(path, info):
    with pytest.raises((fanout.FanoutError, ValueError)):
        fanout.validate_listing({path: info})


def test_status_url_follows_the_role_layout():
    assert fanout.status_url("http://10.0.0.2:8790/kimi") == "http://10.0.0.2:8790/_ct200/kimi/progress.json"


def test_peer_sources_wait_only_on_parent_and_seed():
    peers = [{"name": h, "url": "http://10.0.0.%d:8790/m" % i} for i, h in enumerate(HOSTS, 1)]
    sources = fanout.peer_sources(peers, "d", fanout=2)
    assert [(s.kind, s.name, s.wait) for s in sources][:2] == [("parent", "b", True), ("peer", "c", False)]
    assert sources[-1].kind == "seed" and sources[-1].wait
    assert all("Authorization" not in s.headers for s in sources)


class FakeProbe(object):
    """Scripted answers: ``has`` verdicts in turn, progress values in turn."""

    def __init__(self, has, progress):
        self.has_answers = list(has)
        self.progress_answers = list(progress)

    def has(self, base, path, size):
        return self.has_answers.pop(0) if len(self.has_answers) > 1 else self.has_answers[0]

    def progress(self, base):
        return self.progress_answers.pop(0) if len(self.progress_answers) > 1 else self.progress_answers[0]


def test_wait_returns_as_soon_as_the_parent_has_the_file():
    clock = FakeClock()
    probe = FakeProbe(["lacks", "lacks", "has"], [("running", 1, 1, 0), ("running", 2, 2, 0)])
    assert fanout.wait_for(probe, "http://p/m", "f", 1, 100, 10, 1, clock=clock, sleep=clock.sleep) == "has"
    assert clock.now == 2


def test_wait_gives_up_on_a_parent_that_stopped_making_progress():
    clock = FakeClock()
    probe = FakeProbe(["lacks"], [("running", 5, 5, 1)])
    assert fanout.wait_for(probe, "http://p/m", "f", 1, 1000, 10, 1, clock=clock, sleep=clock.sleep) == "gave_up"
    assert clock.now == 10


def test_wait_keeps_waiting_while_the_parent_progresses():
    clock = FakeClock()
    progress = [("running", i, i, 0) for i in range(30)]
    probe = FakeProbe(["lacks"] * 25 + ["has"], progress)
    assert fanout.wait_for(probe, "http://p/m", "f", 1, 1000, 10, 1, clock=clock, sleep=clock.sleep) == "has"


def test_wait_stops_when_the_parent_finished_without_the_file():
    clock = FakeClock()
    probe = FakeProbe(["lacks"], [("failed", 5, 5, 1)])
    assert fanout.wait_for(probe, "http://p/m", "f", 1, 1000, 60, 1, clock=clock, sleep=clock.sleep) == "gave_up"
    assert clock.now == 0


def test_a_dead_peer_is_reported_at_once():
    clock = FakeClock()
    probe = FakeProbe(["down"], [None])
    assert fanout.wait_for(probe, "http://p/m", "f", 1, 1000, 60, 1, clock=clock, sleep=clock.sleep) == "down"


class CountingProbe(FakeProbe):
    """FakeProbe that notes the clock at every HEAD."""

    def __init__(self, clock, has, progress):
        super().__init__(has, progress)
        self.clock = clock
        self.heads = []

    def has(self, base, path, size):
        self.heads.append(self.clock())
        return super().has(base, path, size)


def test_the_in_order_wait_polls_every_poll_seconds_while_the_source_moves():
    """The next file in order is the one the source completes next: no backed-off poll (that cost
    ~0.12 s a hop); a file waited for out of order is polled backed off, up to 0.25 s."""
    moving = [("running", i, i, 0, "u") for i in range(100)]
    clock = FakeClock()
    probe = CountingProbe(clock, ["lacks"] * 60 + ["has"], moving)
    assert fanout.wait_for(probe, "http://p/m", "f", 1, 100, 10, 0.05, clock=clock, sleep=clock.sleep,
                           in_order=True) == "has"
    gaps = [round(b - a, 6) for a, b in zip(probe.heads, probe.heads[1:])]
    assert max(gaps) == 0.05 and clock.now == pytest.approx(3.0)
    clock = FakeClock()
    probe = CountingProbe(clock, ["lacks"] * 60 + ["has"], moving)
    fanout.wait_for(probe, "http://p/m", "f", 1, 100, 10, 0.05, clock=clock, sleep=clock.sleep)
    assert max(round(b - a, 6) for a, b in zip(probe.heads, probe.heads[1:])) == 0.25


def test_the_in_order_wait_backs_off_while_the_source_publishes_no_progress():
    """A seed still starting (no progress document yet) is not hammered by every child."""
    clock = FakeClock()
    probe = CountingProbe(clock, ["lacks"] * 30 + ["has"], [None])
    fanout.wait_for(probe, "http://p/m", "f", 1, 100, 10, 0.05, clock=clock, sleep=clock.sleep, in_order=True)
    assert max(round(b - a, 6) for a, b in zip(probe.heads, probe.heads[1:])) == 0.25


@pytest.mark.parametrize("path,code", [
    ("model.safetensors.ct200tmp", "unsafe_path"),  # the atomic writer's temp suffix
    ("sub\\model.safetensors", "unsafe_path"),
    ("sub//model.safetensors", "unsafe_path"),
    ("sub/./model.safetensors", "unsafe_path"),
    ("C:model.safetensors", "unsafe_path"),
    ("bad\x07name", "unsafe_path"),
])
def test_handed_listing_paths_follow_hf_downloads_rules(path, code):
    """A peer/seed listing is held to hf_paths, the same rules as a Hub listing given to hf_download."""
    with pytest.raises(fanout.FanoutError) as err:
        fanout.validate_listing({path: {"size": 1, "oid": "a" * 64, "lfs": True}})
    assert err.value.code == code and "unchanged" in err.value.fix


@pytest.mark.parametrize("info", [
    {"size": True, "oid": "a" * 64, "lfs": True},  # a bool is not a size
    {"size": 1, "oid": "a" * 64, "lfs": "yes"},
    "not an object",
])
def test_handed_listing_entries_follow_hf_downloads_rules(info):
    with pytest.raises(fanout.FanoutError) as err:
        fanout.validate_listing({"model.safetensors": info})
    assert err.value.code == "bad_listing"


def test_the_earlier_sibling_is_the_child_of_the_same_parent_just_before():
    peers = [{"name": h, "url": "http://10.0.0.%d:8090/m" % i} for i, h in enumerate("abcdefgh")]
    # seed a: children b, c (seed_fanout 2); b: d, e; c: f, g; d: h
    assert fanout.earlier_sibling(peers, "a", fanout=2, seed_fanout=2) is None
    assert fanout.earlier_sibling(peers, "b", fanout=2, seed_fanout=2) is None
    sibling = fanout.earlier_sibling(peers, "c", fanout=2, seed_fanout=2)
    assert (sibling.name, sibling.base, sibling.wait) == ("b", "http://10.0.0.1:8090/m", False)
    assert fanout.earlier_sibling(peers, "e", fanout=2, seed_fanout=2).name == "d"
    assert fanout.earlier_sibling(peers, "h", fanout=2, seed_fanout=2) is None  # d's only child
    assert fanout.earlier_sibling(peers, "c", fanout=1, seed_fanout=1) is None  # a chain has none


def _final_rounds(count):
    """{index: the copy round in which it gets the final file}, from binomial_parent/binomial_earlier
    alone: a receiver starts after its sender has the file and after the sender's earlier receiver."""
    rounds = {0: 0}
    for index in range(1, count):
        parent, earlier = fanout.binomial_parent(index), fanout.binomial_earlier(index)
        assert parent < index and (earlier is None or parent < earlier < index)
        if earlier is not None:
            assert fanout.binomial_parent(earlier) == parent, "the earlier receiver has another sender"
        rounds[index] = max(rounds[parent], rounds[earlier] if earlier is not None else 0) + 1
    return rounds


@pytest.mark.parametrize("count", [2, 3, 7, 8, 9, 16, 33, 64, 1000])
def test_the_final_file_reaches_the_site_in_log2_copies(count):
    rounds = _final_rounds(count)
    assert max(rounds.values()) == math.ceil(math.log2(count))
    busy = {}
    for index in range(1, count):  # one copy at a time out of every sender
        key = (fanout.binomial_parent(index), rounds[index])
        assert key not in busy, "sender %d sends to %d and %d in round %d" % (key[0], busy.get(key), index, key[1])
        busy[key] = index


def test_the_final_route_of_eight_hosts():
    peers = [{"name": n, "url": "http://10.0.0.%d:8080/m" % i} for i, n in enumerate("abcdefgh")]
    assert fanout.final_route(peers, "a") is None
    routes = dict((n, fanout.final_route(peers, n)) for n in "bcdefgh")
    assert dict((n, r.source.name) for n, r in routes.items()) == {
        "b": "a", "c": "a", "d": "b", "e": "a", "f": "b", "g": "c", "h": "d"}
    assert dict((n, r.after and r.after.name) for n, r in routes.items()) == {
        "b": None, "c": "b", "d": None, "e": "c", "f": "d", "g": None, "h": None}
    assert routes["c"].source.kind == "seed" and routes["f"].source.kind == "peer" and routes["f"].source.wait
    assert fanout.final_route(peers, "a", seed="c").source.name == "c"
