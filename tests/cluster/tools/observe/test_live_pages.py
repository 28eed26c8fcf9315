"""The tools on real stats pages: processes forked by the test publish (``process_stats``)
and allocate on request; ``top --once --json`` sees their RSS and GC move, the scrape
parses, ``profile`` writes its files, and every page is gone afterwards."""
from __future__ import annotations

import json
import os
import queue
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.metadata import data_dir as dd
from cluster.stats import publisher
from cluster.stats.reader import read_all
from cluster.tools.observe import metrics, profile, report, top
from shm_ring.naming import list_objects
from tests.support.bounds import BOUND
from tests.support.processes import CTX
from tests.support.tools import run_tool

pytestmark = pytest.mark.multiprocess
INTERVAL = 0.05
#: What one "allocate" keeps alive: 300,000 dicts in lists, tens of MiB and many gen-0
#: collections.
ALLOCATION = 300


def allocating_child(cluster, commands, answers):
    """Publish as a producer; on "allocate" keep ALLOCATION x 1,000 dicts; on "exit" close
    the page and return."""
    held = publisher.process_stats(cluster, "producer", f"alloc-{os.getpid()}",
                                   interval=INTERVAL)
    held.add_source(lambda: ({"record-send-total": 0}, {}))
    kept = []
    answers.put("ready")
    while True:
        command = commands.get(timeout=BOUND)
        if command == "allocate":
            for _ in range(ALLOCATION):
                kept.append([{"n": n} for n in range(1000)])
            answers.put("allocated")
        elif command == "exit":
            held.close()
            answers.put("closed")
            return


class Children:
    """The forked publishers of a test, stopped through their queues (so they unlink their
    pages), killed by pid when they do not answer."""

    def __init__(self, cluster, count):
        self.processes = []
        for _ in range(count):
            commands, answers = CTX.Queue(), CTX.Queue()
            process = CTX.Process(target=allocating_child, args=(cluster, commands, answers),
                                  daemon=True)
            process.start()
            self.processes.append((process, commands, answers))
        for _, _, answers in self.processes:
            assert answers.get(timeout=BOUND) == "ready"

    @property
    def pids(self):
        return [process.pid for process, _, _ in self.processes]

    def ask(self, index, command, answer):
        _, commands, answers = self.processes[index]
        commands.put(command)
        assert answers.get(timeout=BOUND) == answer

    def stop(self):
        for index, (process, _, _) in enumerate(self.processes):
            if process.is_alive():
                try:
                    self.ask(index, "exit", "closed")
                except (AssertionError, queue.Empty):
                    process.kill()
            process.join(BOUND)
            if process.is_alive():
                process.kill()
                process.join(BOUND)


@pytest.fixture
def live(tmp_path, monkeypatch):
    """(data dir, cluster id, Children(2)); afterwards no object of the cluster is left."""
    monkeypatch.setenv(publisher.ENVIRONMENT_SWITCH, "1")
    data = tmp_path / "data"
    cluster = dd.ensure_cluster_id(data)
    children = Children(cluster, 2)
    try:
        # published with the source (the first publish may come before add_source)
        wait_for(cluster, lambda found: set(children.pids) <= {
            s.pid for s in found if "record-send-total" in s.counters})
        yield data, cluster, children
    finally:
        children.stop()
    assert list_objects(cluster) == []


def wait_for(cluster, condition):
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        found = read_all(cluster)
        if condition(found):
            return found
        time.sleep(INTERVAL)
    raise AssertionError(f"the pages of {cluster} never met the condition")


def top_json(capsys, data):
    assert run_tool(top, "--data-dir", data, "--once", "--json", "--interval", "0.2") == 0
    return {p["pid"]: p for p in json.loads(capsys.readouterr().out)["processes"]}


def test_top_json_shows_rss_and_gc_move_when_a_process_allocates(capsys, live):
    data, cluster, children = live
    before = top_json(capsys, data)
    assert set(children.pids) <= set(before)
    for pid in children.pids:
        shown = before[pid]
        assert shown["role"] == "producer" and shown["state"] == "alive"
        assert shown["rss"] > 0 and shown["cpu_percent"] is not None
        assert len(shown["gc_collections"]) == 3
    children.ask(0, "allocate", "allocated")
    allocated = time.time()
    wait_for(cluster, lambda found: any(s.pid == children.pids[0] and s.updated > allocated
                                        for s in found))
    after = top_json(capsys, data)
    grown, idle = children.pids
    assert after[grown]["rss"] - before[grown]["rss"] > 10 << 20
    assert after[grown]["gc_collections"][0] > before[grown]["gc_collections"][0]
    assert after[idle]["rss"] - before[idle]["rss"] < 10 << 20


def test_the_scrape_parses_and_carries_every_process(capsys, live):
    data, _, children = live
    assert run_tool(metrics, "--data-dir", data, "--once") == 0
    found = {f.name: f for f in text_string_to_metric_families(capsys.readouterr().out)}
    rss = {int(s.labels["pid"]): s.value
           for s in found["ringlog_process_resident_memory_bytes"].samples}
    assert set(children.pids) <= set(rss) and all(rss[pid] > 0 for pid in children.pids)
    collections = {(int(s.labels["pid"]), s.labels["generation"])
                   for s in found["ringlog_gc_collections"].samples}
    assert {(pid, g) for pid in children.pids for g in "012"} <= collections
    sent = {s.labels["client_id"]
            for s in found["kafka_producer_producer_metrics_record_send"].samples}
    assert sent == {f"alloc-{pid}" for pid in children.pids}
    assert found["ringlog_gc_pause_seconds"].type == "histogram"


def test_profile_writes_its_json_and_pngs(capsys, live, tmp_path):
    data, _, children = live
    out = tmp_path / "profile"
    assert run_tool(profile, "--data-dir", data, "--out", out, "--duration", "1s",
                    "--interval", "100ms") == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        (report.SAMPLES_JSON, report.SUMMARY_TXT) + report.PNGS)
    samples = json.loads((out / report.SAMPLES_JSON).read_text())["samples"]
    assert len(samples) >= 2
    assert set(children.pids) <= {p["pid"] for p in samples[-1]["processes"]}
    for name in report.PNGS:
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert "peak RSS per role:" in (out / report.SUMMARY_TXT).read_text()
