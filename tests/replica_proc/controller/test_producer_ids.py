"""Producer id blocks (KIP-730): the active controller hands out consecutive blocks of
BLOCK_SIZE ids, each committed to the metadata log first, and no controller — after a
clean handover, a takeover from a hung one, or a restart of everything — hands an id out
twice. Brokers and controllers live in this process (``env``); the clock is ``env.now``.
"""
from __future__ import annotations

import os

import pytest

from cluster.errors import NotControllerError, UnknownError
from cluster.metadata import data_dir as dd
from replica_proc.controller import metadata_log as mr, producer_ids
from replica_proc.controller.metadata_log import MetadataLog
from replica_proc.controller.producer_ids import BLOCK_SIZE, ProducerIdsBlock
from segments.log_config import LONG_MAX
from tests.replica_proc.controller.test_failover import CONFIG, batches, beat, take_over, tick


def ids(blocks):
    return [i for block in blocks for i in range(block.first_id, block.last_id + 1)]


def test_blocks_are_consecutive_and_recorded_in_the_log(env):
    env.start_broker(0)
    env.start_broker(1)
    controller = env.controller(0)
    env.poll(controller)
    blocks = [controller.allocate_producer_ids(b) for b in (1, 0, 1)]
    assert blocks == [ProducerIdsBlock(1, 0, BLOCK_SIZE),
                      ProducerIdsBlock(0, BLOCK_SIZE, BLOCK_SIZE),
                      ProducerIdsBlock(1, 2 * BLOCK_SIZE, BLOCK_SIZE)]
    records = [r for _, rs in batches(env) for r in rs if r["type"] == mr.PRODUCER_IDS]
    assert records == [mr.producer_ids_record(b, -1, (n + 1) * BLOCK_SIZE)
                       for n, b in enumerate((1, 0, 1))]
    version = env.page.read().version
    assert version == controller.image.version  # each block is one published log record


def test_a_standby_refuses_and_the_next_controller_continues_after_the_log(env):
    for b in range(2):
        env.start_broker(b)
    first, second = env.controller(0), env.controller(1)
    env.poll(first)
    env.poll(second)
    with pytest.raises(NotControllerError):
        second.allocate_producer_ids(1)
    given = [first.allocate_producer_ids(1) for _ in range(2)]
    first.close()
    env.poll(second)
    assert second.active
    given.append(second.allocate_producer_ids(0))
    assert given[-1].first_id == 2 * BLOCK_SIZE
    assert len(set(ids(given))) == 3 * BLOCK_SIZE


def test_a_takeover_from_a_hung_controller_never_reuses_an_id(env):
    for b in range(3):
        env.start_broker(b)
    beat(env, 0, 1, 2)
    controllers = [env.controller(b, **CONFIG) for b in range(3)]
    tick(env, controllers, [0, 1, 2])
    c0, c1, _ = controllers
    given = [c0.allocate_producer_ids(2), c0.allocate_producer_ids(1)]
    take_over(env, controllers)
    given.append(c1.allocate_producer_ids(2))
    with pytest.raises(NotControllerError):  # the deposed one resumes: fenced
        c0.allocate_producer_ids(0)
    given.append(c1.allocate_producer_ids(0))
    assert len(set(ids(given))) == len(given) * BLOCK_SIZE
    assert given[-1].first_id == 3 * BLOCK_SIZE


def test_a_restart_of_everything_replays_the_next_id_even_after_a_crash(env):
    env.start_broker(0)
    controller = env.controller(0)
    env.poll(controller)
    given = [controller.allocate_producer_ids(0) for _ in range(3)]
    controller.close()
    log = MetadataLog(env.data_dir)
    log.replay(env.cluster_id)
    assert log.next_producer_id == 3 * BLOCK_SIZE
    log.close()
    # a crash (no clean-shutdown marker) replays the same
    os.remove(os.path.join(env.data_dir, dd.METADATA_LOG_DIR, ".clean-shutdown"))
    again = env.controller(0)
    env.poll(again)
    assert again.active
    given.append(again.allocate_producer_ids(0))
    assert len(set(ids(given))) == 4 * BLOCK_SIZE


def test_the_id_space_ends_with_unknown_server_error():
    last = LONG_MAX - BLOCK_SIZE + 1
    assert producer_ids.next_block(last - 1, 0).last_id == LONG_MAX - 1
    with pytest.raises(UnknownError, match="exhausted all producer ids"):
        producer_ids.next_block(last, 0)


def test_a_record_moving_the_next_id_back_is_refused():
    assert producer_ids.replayed(5, mr.producer_ids_record(0, -1, 7)) == 7
    with pytest.raises(ValueError, match="moves next_producer_id back"):
        producer_ids.replayed(7, mr.producer_ids_record(0, -1, 5))
