"""The metadata page: publish/read round trips, the seqlock across processes, a dead writer."""
from __future__ import annotations

import os
import signal
import uuid

import pytest

from cluster.metadata import page_descriptor as md
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from cluster.metadata.page import MetadataPage, metadata_page_name
from shm_ring.naming import SharedRegion, cleanup_stale, list_objects
from tests.support.bounds import BOUND
from tests.support.processes import CTX


@pytest.fixture
def cluster_id():
    cluster = "mp" + uuid.uuid4().hex[:16]
    yield cluster
    cleanup_stale(cluster)
    assert list_objects(cluster) == []


@pytest.fixture
def page(cluster_id):
    created = MetadataPage.create(cluster_id, size=64 * 1024)
    yield created
    created.unlink()
    created.close()


def make_image(cluster_id, version, topics=2, partitions=3):
    """An image whose every part repeats its version, so a reader can tell a mix of two."""
    brokers = {b: BrokerInfo(b, 1000 + version, version % 2 == 0) for b in range(3)}
    infos = {}
    for t in range(topics):
        name = f"t{t}"
        infos[name] = TopicInfo(
            name, f"id-{version}-{t}",
            tuple(PartitionState(name, p, p % 3, version, (p % 3,), (p % 3,))
                  for p in range(partitions)),
            {"check": str(version)})
    return MetadataImage(version, cluster_id, version % 3, brokers, infos)


def check_consistent(image):
    """Every part of a make_image image names the same version (else: a torn read)."""
    v = image.version
    assert all(b.pid == 1000 + v for b in image.brokers.values())
    for name, topic in image.topics.items():
        assert topic.configs == {"check": str(v)}
        assert topic.topic_id == f"id-{v}-{name[1:]}"
        assert all(p.leader_epoch == v for p in topic.partitions)
    return v


def test_name_is_the_clusters_metadata_object():
    assert metadata_page_name("c1") == "/ringlog.c1.metadata"


def test_empty_page_reads_as_the_empty_image(page, cluster_id):
    assert page.version == 0
    assert page.read() == MetadataImage.empty(cluster_id)


def test_publish_then_read_in_another_mapping(page, cluster_id):
    image = make_image(cluster_id, 7)
    page.publish(image)
    with MetadataPage.open(cluster_id) as reader:
        assert reader.capacity == 64 * 1024 - md.HEADER_LENGTH
        assert reader.read() == image
        assert reader.version == 2


def test_each_publish_moves_the_sequence_by_two_and_read_parses_only_on_change(page,
                                                                               cluster_id):
    with MetadataPage.open(cluster_id) as reader:
        page.publish(make_image(cluster_id, 1))
        first = reader.read()
        assert reader.read() is first  # same sequence: the cached image, not a new parse
        page.publish(make_image(cluster_id, 2))
        assert reader.version == 4
        assert reader.read().version == 2


def test_an_image_larger_than_the_page_is_refused_and_nothing_changes(page, cluster_id):
    page.publish(make_image(cluster_id, 1))
    huge = make_image(cluster_id, 2, topics=400, partitions=20)
    with pytest.raises(ValueError, match=r"metadata image version 2 is \d+ bytes, more than "
                                         r"the 65280"):
        page.publish(huge)
    assert page.version == 2
    assert page.read().version == 1


def test_a_writer_that_died_mid_write_leaves_readers_on_their_last_image(page, cluster_id):
    with MetadataPage.open(cluster_id) as reader:
        page.publish(make_image(cluster_id, 1))
        assert reader.read().version == 1
        with page._region.buf[:md.HEADER_LENGTH].cast("q") as words:  # a torn publish
            words[md.word_index(md.SEQUENCE_OFFSET)] = 3
            page._region.buf[md.IMAGE_OFFSET:md.IMAGE_OFFSET + 5] = b"GARBA"
        assert reader.read(timeout=0.05).version == 1  # stale, never torn
        with MetadataPage.open(cluster_id) as newcomer:
            with pytest.raises(TimeoutError, match="sequence 3, a write in progress"):
                newcomer.read(timeout=0.05)
        # the next controller skips 3: were its writer only stopped, it would end with 4
        page.publish(make_image(cluster_id, 2))
        assert page.version == 6
        assert reader.read().version == 2


def test_open_refuses_missing_and_foreign_objects(cluster_id):
    with pytest.raises(FileNotFoundError):
        MetadataPage.open(cluster_id)
    region = SharedRegion.create(metadata_page_name(cluster_id), 4096)
    try:
        with pytest.raises(FileNotFoundError, match="not initialised"):
            MetadataPage.open(cluster_id)
        region.buf[:8] = b"RINGLOG!"
        with pytest.raises(ValueError, match="is not a metadata page: magic"):
            MetadataPage.open(cluster_id)
    finally:
        region.unlink()
        region.close()


def test_create_refuses_an_existing_page_and_a_size_without_room(page, cluster_id):
    with pytest.raises(FileExistsError):
        MetadataPage.create(cluster_id)
    with pytest.raises(ValueError, match="must exceed its 256-byte header"):
        MetadataPage.create("other" + cluster_id, size=256)


def test_close_and_unlink_are_safe_twice(cluster_id):
    created = MetadataPage.create(cluster_id, size=8192)
    created.unlink()
    created.unlink()
    created.close()
    created.close()
    assert list_objects(cluster_id) == []


# -- across processes --------------------------------------------------------------------------

def writer(cluster_id, count, barrier):
    """Publish images of many sizes as fast as possible."""
    page = MetadataPage.open(cluster_id)
    barrier.wait(BOUND)
    for version in range(1, count + 1):
        page.publish(make_image(cluster_id, version, topics=1 + version % 17,
                                partitions=1 + version % 29))
    page.close()


def reader(cluster_id, done, pipe, barrier):
    """Read until the writer is done; check every image; report what was seen."""
    page = MetadataPage.open(cluster_id)
    versions = set()
    reads = 0
    barrier.wait(BOUND)
    try:
        while True:
            finished = done.is_set()
            image = page.read()
            reads += 1
            if image.version:
                versions.add(check_consistent(image))
            if finished:
                break
        pipe.send(("ok", reads, len(versions), max(versions, default=0)))
    except (AssertionError, ValueError) as exc:  # a mix of two images, or not even JSON
        pipe.send(("torn", repr(exc)))
    finally:
        page.close()


@pytest.mark.multiprocess
def test_readers_in_other_processes_never_see_a_torn_image(page, cluster_id):
    count = 3000
    done = CTX.Event()
    ours, theirs = CTX.Pipe()
    barrier = CTX.Barrier(3)
    readers = [CTX.Process(target=reader, args=(cluster_id, done, theirs, barrier))
               for _ in range(2)]
    write = CTX.Process(target=writer, args=(cluster_id, count, barrier))
    started = readers + [write]
    try:
        for process in started:
            process.start()
        write.join(BOUND)
        assert write.exitcode == 0
        done.set()
        results = []
        for _ in readers:
            assert ours.poll(BOUND), "a reader did not report"
            results.append(ours.recv())
        for result in results:
            assert result[0] == "ok", result
            _, reads, distinct, last = result
            assert distinct > 1  # it read while the writer was publishing
            assert last == count  # and saw the final image once the writer was done
    finally:
        for process in started:
            if process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
            process.join(BOUND)
