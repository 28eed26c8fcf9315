"""``ringlog broker start|stop|kill``: one broker of a running cluster, as
``kafka-server-start.sh`` / ``kafka-server-stop.sh`` act on one Kafka broker.

::

    ringlog broker start --data-dir D --id N [--timeout S]
    ringlog broker stop --data-dir D --id N [--timeout S]
    ringlog broker kill --data-dir D --id N [--timeout S]

``start`` asks the supervisor of D (``ringlog cluster start``, foreground or detached) to start
broker N with the cluster's command and settings, waits until it serves and prints its pid.
With no supervisor running it refuses and says which ``ringlog cluster`` command to run: a
broker is always its supervisor's child (see ``cluster.supervisor.broker_control``).
``stop`` sends SIGTERM and waits (``--timeout``) for a clean shutdown; ``kill`` sends SIGKILL
(a crash, on purpose). The supervisor counts neither as a failure and does not restart the
broker. A failure is one line naming D, the broker and the command to run next; exit 1.
"""
from __future__ import annotations

import logging
import os

from cluster.errors import BrokerNotAvailableError, KafkaStorageError
from cluster.metadata import data_dir as dd
from cluster.supervisor.broker_control import kill_broker, start_broker, stop_broker
from cluster.supervisor.supervisor import START_TIMEOUT, STOP_TIMEOUT
from cluster.tools.support import fail

ACTIONS = {
    "start": (start_broker, START_TIMEOUT, "start broker N through the cluster's supervisor"),
    "stop": (stop_broker, STOP_TIMEOUT, "stop broker N cleanly (SIGTERM) and wait"),
    "kill": (kill_broker, STOP_TIMEOUT, "kill broker N (SIGKILL) and wait until it is gone"),
}
DONE = {"start": "started", "stop": "stopped", "kill": "killed"}


def add_arguments(parser):
    commands = parser.add_subparsers(dest="broker_command", metavar="{start,stop,kill}",
                                     required=True)
    for name, (_, timeout, help_text) in ACTIONS.items():
        command = commands.add_parser(name, help=help_text, description=help_text)
        command.add_argument("--data-dir", required=True, help="the cluster's data directory")
        command.add_argument("--id", type=int, required=True, metavar="N",
                             help="the broker id")
        command.add_argument("--timeout", type=float, default=timeout,
                             help=f"seconds to wait (default {timeout})")


def run(args):
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    data_dir = os.path.abspath(args.data_dir)
    action, _, _ = ACTIONS[args.broker_command]
    dd.set_private_umask()  # the request file, and D if need be, are private
    try:
        pid = action(data_dir, args.id, timeout=args.timeout)
    except (BrokerNotAvailableError, KafkaStorageError, ValueError) as exc:
        return fail(exc)
    print(f"{DONE[args.broker_command]} broker {args.id} (pid {pid}) of {data_dir}", flush=True)
    return 0
