"""``ringlog consumer-groups``: list, describe and delete consumer groups, reset and delete
their committed offsets, as kafka-consumer-groups does.

::

    ringlog consumer-groups --bootstrap-server D --list [--state [STATES]]
    ringlog consumer-groups --bootstrap-server D --describe (--group G ... | --all-groups)
                            [--offsets | --members | --state] [--verbose]
    ringlog consumer-groups --bootstrap-server D --delete (--group G ... | --all-groups)
    ringlog consumer-groups --bootstrap-server D --delete-offsets --group G --topic T[:P,...]
    ringlog consumer-groups --bootstrap-server D --reset-offsets (--group G ... | --all-groups)
        (--topic T[:P,...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N
         | --to-datetime YYYY-MM-DDTHH:mm:SS.sss | --by-duration PnDTnHnMnS | --from-file F)
        [--dry-run | --execute] [--export]

Kafka's ConsumerGroupCommand, its tables, messages and exit codes:

* ``--list`` prints the consumer groups' ids (ListGroups at every broker), one a line;
  with ``--state`` a ``GROUP STATE`` table, only the groups in the comma-separated states
  if some are given (case does not matter).
* ``--describe`` prints, per group sorted by id, Kafka's column tables (``-`` for what is
  unknown): by default the offsets view ``GROUP TOPIC PARTITION CURRENT-OFFSET
  LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID`` (``--verbose`` adds LEADER-EPOCH) — one
  row per assigned partition, members with the most partitions first, then the committed
  partitions no member owns; ``--members`` (``--verbose``: epochs and assignments) and
  ``--state`` (coordinator, assignor, state, member count). A group that does not exist
  prints ``Error: Consumer group 'G' does not exist.``; an Empty group says on stderr that
  it has no active members, a rebalancing one that it is rebalancing.
* ``--reset-offsets`` computes new offsets for the partitions of ``--topic`` (all of a
  topic's, or those listed after ``:``) or ``--all-topics`` (those with a committed offset),
  clamped to [log start, log end] (with a warning), and prints the plan (``GROUP TOPIC
  PARTITION NEW-OFFSET``, or CSV with ``--export``); it commits them only with
  ``--execute``, and only for a group that is Empty or Dead (else Kafka's "Assignments can
  only be reset..." error). ``--from-file`` reads a plan as ``--export`` writes it.
* ``--delete`` deletes groups without members; ``--delete-offsets`` a group's committed
  offsets of topics its members do not consume, printing ``TOPIC PARTITION STATUS``.

Usage errors go to stderr with exit code 1; what goes wrong while the command runs is
printed to stdout as ``Error: ...``, as Kafka's tool prints it, and the tool exits 1 (a
group that does not exist, a refused or partly failed reset, deletion or offset deletion),
so scripts can tell. Offsets of logs
come from ListOffsets (a KafkaConsumer without a group), groups from the KafkaAdminClient.

Called from the main thread of the ``ringlog`` process; one admin client per call.
"""
from __future__ import annotations

import datetime
import logging
import re
import sys
import time

from cluster.admin.kafka_admin_client import KafkaAdminClient
from cluster.errors import KafkaError, NoError
from cluster.structs import OffsetAndMetadata, TopicPartition
from cluster.tools.support import (
    FAILED,
    ToolError,
    add_bootstrap_argument,
    client_properties,
    setup_logging,
)
from consumer_proc.consumer import KafkaConsumer

log = logging.getLogger(__name__)

ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_offset", "shift_by", "to_datetime", "by_duration", "to_earliest",
             "to_latest", "to_current", "from_file")
MISSING = "-"
#: The states of a classic consumer group (Kafka's GroupState names).
STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
CLIENT_ID = "ConsumerGroupCommand"
_FAILED_PREFIX = "Executing consumer group command failed due to "
#: Kafka's warning, its missing space after "missing." included.
_NO_EXECUTE = ("WARN: No action will be performed as the --execute option is missing.In a "
               "future major release, the default behavior of this command will be to prompt "
               "the user before executing the reset rather than doing a dry run. You should "
               "add the --dry-run option explicitly if you are scripting this command and want "
               "to keep the current default behavior without prompting.")
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}(Z|[+-]\d{2}:?\d{2})?")
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


class CommandFailed(Exception):
    """The command went wrong while running: printed as Kafka's ``Error: Executing consumer
    group command failed due to ...`` (stdout, exit code 1)."""


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--command-config", metavar="FILE",
                        help="admin client properties file")
    for name, text in (("list", "list all consumer groups"),
                       ("describe", "describe consumer groups and list their offset lag"),
                       ("delete", "delete consumer groups (only those without members)"),
                       ("reset-offsets", "reset the committed offsets of groups (Empty or "
                                         "Dead ones only); a dry run without --execute"),
                       ("delete-offsets", "delete the committed offsets of a group")):
        parser.add_argument(f"--{name}", action="store_true", help=text)
    parser.add_argument("--group", action="append", default=[], help="a consumer group id")
    parser.add_argument("--all-groups", action="store_true", help="every consumer group")
    parser.add_argument("--topic", action="append", default=[],
                        help="a topic, or TOPIC:P1,P2 for some of its partitions")
    parser.add_argument("--all-topics", action="store_true",
                        help="every topic with a committed offset (--reset-offsets)")
    parser.add_argument("--offsets", action="store_true",
                        help="--describe: the offsets view (the default)")
    parser.add_argument("--members", action="store_true", help="--describe: the members")
    parser.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                        help="--describe: the group's state; --list: show states, only "
                             "those given (comma-separated) if any")
    parser.add_argument("--verbose", action="store_true",
                        help="more columns in --describe --members and --offsets")
    parser.add_argument("--timeout", type=int, default=5000, metavar="MS",
                        help="how long to wait for the brokers (default 5000)")
    parser.add_argument("--execute", action="store_true", help="commit the reset offsets")
    parser.add_argument("--dry-run", action="store_true",
                        help="only print the reset plan (the default)")
    parser.add_argument("--export", action="store_true",
                        help="print the reset plan as CSV, for --from-file")
    parser.add_argument("--to-earliest", action="store_true", help="reset to the log start")
    parser.add_argument("--to-latest", action="store_true", help="reset to the log end")
    parser.add_argument("--to-current", action="store_true",
                        help="reset to the committed offset (the log end without one)")
    parser.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    parser.add_argument("--shift-by", type=int, metavar="N",
                        help="move the committed offset by N (may be negative)")
    parser.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                        help="reset to the first offset at or after this time (UTC unless "
                             "a zone is given)")
    parser.add_argument("--by-duration", metavar="PnDTnHnMnS",
                        help="reset to the first offset at or after now minus this duration")
    parser.add_argument("--from-file", metavar="CSV",
                        help="reset to the offsets of a plan (as --export writes it)")


def run(args):
    setup_logging()
    try:
        action = _check_options(args)
        props = client_properties(args.bootstrap_server, args.command_config)
        props.setdefault("request.timeout.ms", str(args.timeout))
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return FAILED
    try:
        with KafkaAdminClient(**props) as admin:
            command = _Command(admin, args, props["bootstrap.servers"])
            try:
                getattr(command, action)()
            finally:
                command.close()
    except ToolError as exc:  # Kafka's printUsageAndExit, reached while running
        print(exc, file=sys.stderr)
        return FAILED
    except (CommandFailed, KafkaError, ValueError) as exc:
        print_error(_FAILED_PREFIX + str(exc))
        return FAILED
    return FAILED if command.failed else 0


def print_error(message):
    """Kafka's printError: ``\\nError: <message>`` on stdout."""
    print(f"\nError: {message}", flush=True)


def _spec(name):
    """How Kafka's messages name an option (joptsimple's OptionSpec): ``[to-offset]``."""
    return f"[{name.replace('_', '-')}]"


def _check_options(args):
    """The action (a method of _Command), after Kafka's checks of the options
    (ConsumerGroupCommandOptions.checkArgs, then main's one-action rule)."""
    given = {name for name, value in vars(args).items()
             if value is not None and value is not False and value != []}
    unavailable = [o for o, allowed in _AVAILABLE_IF.items()
                   if o in given and not given & set(allowed)]
    if unavailable:
        raise ToolError(f"Option(s) {_spec(unavailable[0])} are unavailable given other "
                        f"options on the command line")
    scope = _spec("group") + ", " + _spec("all_groups")
    if "describe" in given:
        if not given & {"group", "all_groups"}:
            raise ToolError(f"Option [describe] takes one of these options: {scope}")
        if len(given & {"members", "offsets", "state"}) > 1:
            raise ToolError("Option [describe] takes at most one of these options: "
                            "[members], [offsets], [state]")
        if args.state:
            raise ToolError("Option [describe] does not take a value for [state]")
    if "delete" in given:
        if not given & {"group", "all_groups"}:
            raise ToolError(f"Option [delete] takes one of these options: {scope}")
        if "topic" in given:
            raise ToolError("The consumer does not support topic-specific offset deletion "
                            "from a consumer group.")
    if "delete_offsets" in given and not {"group", "topic"} <= given:
        raise ToolError("Option [delete-offsets] takes the following options: [group], "
                        "[topic]")
    if "reset_offsets" in given:
        if args.dry_run and args.execute:
            raise ToolError("Option [reset-offsets] only accepts one of [execute] and "
                            "[dry-run]")
        if not args.dry_run and not args.execute:
            print(_NO_EXECUTE, file=sys.stderr)
        if not given & {"group", "all_groups"}:
            raise ToolError(f"Option [reset-offsets] takes one of these options: {scope}")
        scenarios = [s for s in SCENARIOS if s in given]
        if len(scenarios) > 1:
            raise ToolError(f"Option \"{_spec(scenarios[0])}\" can't be used with option "
                            f"\"{_spec(scenarios[1])}\"")
    for option, invalid in (("group", ("all_groups", "list")),
                            ("topic", ("list", "describe"))):
        clash = next((o for o in invalid if option in given and o in given), None)
        if clash is not None:
            raise ToolError(f"Option \"{_spec(option)}\" can't be used with option "
                            f"\"{_spec(clash)}\"")
    actions = [a for a in ACTIONS if a in given]
    if len(actions) != 1:
        raise ToolError("Command must include exactly one action: "
                        + ", ".join("--" + a.replace("_", "-") for a in ACTIONS))
    action = actions[0]
    if action == "reset_offsets":
        if not any(s in given for s in SCENARIOS):
            raise ToolError("Option '[reset-offsets]' requires one of the following scenarios: "
                            "[" + ", ".join(_spec(s) for s in SCENARIOS) + "]")
        if not given & {"topic", "all_topics", "from_file"}:
            raise ToolError("One of the reset scopes should be defined: --all-topics, --topic.")
        if args.to_datetime is not None and not _DATETIME.fullmatch(args.to_datetime):
            raise ToolError(f"Error parsing timestamp {args.to_datetime!r}: expected "
                            f"yyyy-MM-dd'T'HH:mm:ss.SSS with an optional zone")
        if args.by_duration is not None and not _DURATION.fullmatch(args.by_duration):
            raise ToolError(f"Text cannot be parsed to a Duration: {args.by_duration}")
    return action


#: Options Kafka makes ``availableIf`` some actions.
_AVAILABLE_IF = {"members": ("describe",), "verbose": ("describe",),
                 "offsets": ("describe",), "state": ("describe", "list")}


class _Command:
    """One run of the tool: the admin client, the options, and a KafkaConsumer (no group)
    made on first use for the logs' offsets; ``close()`` closes that consumer."""

    def __init__(self, admin, args, bootstrap_servers):
        self.admin = admin
        self.args = args
        self.bootstrap_servers = bootstrap_servers
        self._consumer = None
        self.failed = False  # an error was printed: the tool exits 1

    def _error(self, message):
        """Kafka's printError, and the run fails (exit code 1)."""
        self.failed = True
        print_error(message)

    def close(self):
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- --list ----------------------------------------------------------------------------

    def list(self):
        wanted = None if self.args.state is None else _states(self.args.state)
        groups = self._group_ids()
        if wanted is None:
            for group_id in groups:
                print(group_id)
            return
        described = self.admin.describe_consumer_groups(groups) if groups else []
        rows = [(g.group, g.state) for g in described if not wanted or g.state in wanted]
        width = max([15] + [len(group) for group, _ in rows]) + 10
        print(f"{'GROUP':<{width}} {'STATE':<20}")
        for group, state in rows:
            print(f"{group:<{width}} {state:<20}")

    def _group_ids(self):
        """The consumer groups' ids (protocol type ``consumer``, or none), sorted."""
        return [group for group, protocol_type in self.admin.list_consumer_groups()
                if protocol_type in ("consumer", "")]

    def _selected_groups(self):
        return self._group_ids() if self.args.all_groups else list(self.args.group)

    # -- --describe --------------------------------------------------------------------------

    def describe(self):
        groups = {g.group: g for g in self.admin.describe_consumer_groups(
            self._selected_groups())}
        for group_id in sorted(groups):
            group = groups[group_id]
            if self.args.members:
                self._print_members(group)
            elif self.args.state is not None:
                self._print_state(group)
            else:
                self._print_offsets(group)

    def _print_offsets(self, group):
        rows = self._offset_rows(group)
        if not _should_print(self._error, group.group, group.state, len(rows)):
            return
        verbose = self.args.verbose
        widths = [max([15] + [len(row[i]) for row in rows]) for i in (0, 1, 7, 8)]
        header = ("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET",
                  "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")
        out = []
        for row in [header] + rows:
            g, t, p, epoch, current, end, lag, consumer, host, client = row
            middle = (f"{p:<10} {epoch:<15} " if verbose else f"{p:<10} ")
            out.append(f"\n{g:<{widths[0]}} {t:<{widths[1]}} {middle}{current:<15} "
                       f"{end:<15} {lag:<15} {consumer:<{widths[2]}} {host:<{widths[3]}} "
                       f"{client}")
        print("".join(out))

    def _offset_rows(self, group):
        """Kafka's PartitionAssignmentState rows: (group, topic, partition, leader epoch,
        current offset, log end offset, lag, consumer id, host, client id) as strings."""
        committed = self._committed(group.group)
        owners = []
        for member in sorted(_with_partitions(group.members),
                             key=lambda m: -len(_partitions_of(m))):
            owners.extend((tp, member) for tp in sorted(_partitions_of(member)))
        assigned = {tp for tp, _ in owners}
        unowned = [(tp, None) for tp in sorted(committed) if tp not in assigned]
        ends = self._log_end_offsets([tp for tp, _ in owners + unowned])
        rows = []
        for tp, member in owners + unowned:
            offset = committed.get(tp)
            current = None if offset is None or offset.offset < 0 else offset.offset
            end = ends.get(tp)
            epoch = (offset.leader_epoch if offset is not None and offset.leader_epoch is not None
                     and offset.leader_epoch >= 0 else None)
            lag = None if current is None or end is None else end - current
            rows.append((group.group, tp.topic, str(tp.partition), _shown(epoch),
                         _shown(current), _shown(end), _shown(lag),
                         MISSING if member is None else member.member_id,
                         MISSING if member is None else member.client_host,
                         MISSING if member is None else member.client_id))
        # Kafka sorts each member's rows by topic and partition; members keep their order.
        return rows

    def _print_members(self, group):
        members = group.members
        printed = _should_print(self._error, group.group, group.state, len(members))
        instance = any(m.group_instance_id for m in members) if printed else False
        assignments = [_assignment_string(_partitions_of(m)) for m in members]
        widths = {"group": 15, "consumer": 15, "instance": 17, "host": 15, "client": 15,
                  "current": 20}
        if printed:
            for m, text in zip(members, assignments):
                widths["group"] = max(widths["group"], len(group.group))
                widths["consumer"] = max(widths["consumer"], len(m.member_id))
                widths["instance"] = max(widths["instance"], len(m.group_instance_id or ""))
                widths["host"] = max(widths["host"], len(m.client_host))
                widths["client"] = max(widths["client"], len(m.client_id))
                widths["current"] = max(widths["current"], len(text))

        def line(g, consumer, inst, host, client, count):
            cells = [f"{g:<{widths['group']}}", f"{consumer:<{widths['consumer']}}"]
            if instance:
                cells.append(f"{inst:<{widths['instance']}}")
            cells += [f"{host:<{widths['host']}}", f"{client:<{widths['client']}}",
                      f"{count:<15}"]
            return " ".join(cells) + " "

        def verbose(current_epoch, current, target_epoch, target):
            return (f"{current_epoch:<15} {current:<{widths['current']}} {target_epoch:<15} "
                    f"{target:<20}")

        out = "\n" + line("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                          "#PARTITIONS")
        if self.args.verbose:
            out += verbose("CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                           "TARGET-ASSIGNMENT")
        print(out)
        for m, text in zip(members, assignments):
            row = line(group.group, m.member_id, m.group_instance_id or "", m.client_host,
                       m.client_id, str(len(_partitions_of(m))))
            if self.args.verbose:
                row += verbose(MISSING, text or MISSING, MISSING, MISSING)
            print(row)

    def _print_state(self, group):
        if not _should_print(self._error, group.group, group.state, 1):
            return
        node = self.admin.find_coordinator(group.group)
        coordinator = f"{node['host']}:{node['port']}  ({node['node_id']})"
        cwidth, gwidth = max(25, len(coordinator)), max(15, len(group.group))
        strategy = group.protocol or MISSING
        if self.args.verbose:
            rows = [("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                     "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"),
                    (group.group, coordinator, strategy, group.state, MISSING, MISSING,
                     str(len(group.members)))]
            print("".join(f"\n{g:<{gwidth}} {c:<{cwidth}} {a:<20} {s:<20} {e:<15} {t:<25} {n}"
                          for g, c, a, s, e, t, n in rows))
        else:
            rows = [("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                    (group.group, coordinator, strategy, group.state, str(len(group.members)))]
            print("".join(f"\n{g:<{gwidth}} {c:<{cwidth}} {a:<20} {s:<20} {n}"
                          for g, c, a, s, n in rows))

    # -- --delete --------------------------------------------------------------------------

    def delete(self):
        results = self.admin.delete_consumer_groups(self._selected_groups())
        deleted = [g for g, error in results if error is NoError]
        failed = [(g, error) for g, error in results if error is not NoError]
        if not failed:
            print("Deletion of requested consumer groups ("
                  + ", ".join(f"'{g}'" for g in deleted) + ") was successful.")
            return
        self._error("Deletion of some consumer groups failed:")
        for group_id, error in failed:
            print(f"* Group '{group_id}' could not be deleted due to: "
                  f"{error.__name__}: {error.description}")
        if deleted:
            print("\nThese consumer groups were deleted successfully: "
                  + ", ".join(f"'{g}'" for g in deleted))

    # -- --delete-offsets ------------------------------------------------------------------

    def delete_offsets(self):
        (group_id,) = self.args.group
        results = {}
        partitions = []
        whole = []
        for arg in self.args.topic:
            if ":" in arg:
                partitions.extend(_topic_partitions(arg))
            else:
                whole.append(arg)
        for topic in whole:
            try:
                (described,) = self.admin.describe_topics([topic])
            except KafkaError as exc:
                results[TopicPartition(topic, -1)] = exc
                continue
            partitions.extend(TopicPartition(topic, p["partition_index"])
                              for p in described["partitions"])
        partitions = list(dict.fromkeys(partitions))
        top = None
        try:
            errors = self.admin.delete_consumer_group_offsets(group_id, partitions)
        except KafkaError as exc:
            top = exc
            errors = {tp: type(exc) for tp in partitions}
        for tp, error in errors.items():
            results[tp] = None if error is NoError else error(error.description)
        if top is None:
            top = next((e for e in results.values() if e is not None), None)
        if top is None:
            print(f"Request succeeded for deleting offsets from group {group_id}.")
        elif type(top).__name__ in ("InvalidGroupIdError", "GroupIdNotFoundError",
                                    "GroupAuthorizationFailedError", "NonEmptyGroupError"):
            self._error(type(top).description)
        elif type(top).__name__ in ("GroupSubscribedToTopicError",
                                    "TopicAuthorizationFailedError",
                                    "UnknownTopicOrPartitionError"):
            self._error("Encountered some partition-level error, see the follow-up details.")
        else:
            self._error(f"Encountered some unknown error: {type(top).__name__}")
        width = max([15] + [len(tp.topic) for tp in results])
        out = [f"\n{'TOPIC':<{width}} {'PARTITION':<10} {'STATUS':<15}"]
        for tp in sorted(results, key=lambda tp: tp.topic + str(tp.partition)):
            error = results[tp]
            status = "Successful" if error is None else f"Error: {_error_text(error)}"
            partition = str(tp.partition) if tp.partition >= 0 else MISSING
            out.append(f"\n{tp.topic:<{width}} {partition:<10} {status:<15}")
        print("".join(out))

    # -- --reset-offsets -------------------------------------------------------------------

    def reset_offsets(self):
        plans = {}
        for group in self.admin.describe_consumer_groups(self._selected_groups()):
            if group.state in ("Empty", "Dead"):
                plans[group.group] = self._reset_inactive(group.group)
            else:
                self._error(f"Assignments can only be reset if the group '{group.group}' is "
                            f"inactive, but the current state is {group.state}.")
                plans[group.group] = {}
        if self.args.export:
            single = len(self.args.group) == 1
            print("".join(
                (f"{tp.topic},{tp.partition},{offset.offset}\n" if single else
                 f"{group_id},{tp.topic},{tp.partition},{offset.offset}\n")
                for group_id, plan in sorted(plans.items()) for tp, offset in sorted(
                    plan.items())))
            return
        gwidth = max([15] + [len(g) for g in plans])
        twidth = max([15] + [len(tp.topic) for plan in plans.values() for tp in plan])
        out = []
        if plans:
            out.append(f"\n{'GROUP':<{gwidth}} {'TOPIC':<{twidth}} {'PARTITION':<10} "
                       f"NEW-OFFSET")
        for group_id, plan in sorted(plans.items()):
            for tp, offset in sorted(plan.items()):
                out.append(f"\n{group_id:<{gwidth}} {tp.topic:<{twidth}} "
                           f"{tp.partition:<10} {offset.offset}")
        print("".join(out))

    def _reset_inactive(self, group_id):
        args = self.args
        if args.from_file is not None:
            plan = _read_plan(args.from_file, args.group).get(group_id)
            if plan is None:
                self._error(f"No reset plan for group {group_id} found.")
                return {}
            partitions = list(plan)
        elif args.all_topics:
            partitions = sorted(self._committed(group_id))
        else:
            partitions = self._topic_partitions(args.topic)
        self._check_partitions(partitions)
        if args.from_file is not None:
            offsets = self._clamped(plan)
        elif args.to_offset is not None:
            offsets = self._clamped({tp: args.to_offset for tp in partitions})
        elif args.to_earliest:
            offsets = self._consumer_call("beginning_offsets", partitions)
        elif args.to_latest:
            offsets = self._log_end_offsets(partitions)
        elif args.shift_by is not None:
            current = self._committed(group_id)
            for tp in partitions:
                if tp not in current:
                    raise ToolError(f"Cannot shift offset for partition {_tp(tp)} since there "
                                    f"is no current committed offset")
            offsets = self._clamped({tp: current[tp].offset + args.shift_by
                                     for tp in partitions})
        elif args.to_current:
            current = self._committed(group_id)
            offsets = {tp: current[tp].offset for tp in partitions if tp in current}
            offsets.update(self._log_end_offsets([tp for tp in partitions
                                                  if tp not in current]))
        else:
            timestamp = (_datetime_ms(args.to_datetime) if args.to_datetime is not None
                         else int(time.time() * 1000) - _duration_ms(args.by_duration))
            offsets = self._offsets_at(partitions, timestamp)
        prepared = {tp: OffsetAndMetadata(offset) for tp, offset in offsets.items()}
        if args.execute and prepared:
            errors = self.admin.alter_consumer_group_offsets(group_id, prepared)
            failed = [(tp, e) for tp, e in errors.items() if e is not NoError]
            if failed:
                tp, error = failed[0]
                raise error(f"group '{group_id}', partition {_tp(tp)}: {error.description}")
        return prepared

    def _committed(self, group_id):
        """The group's committed offsets, ``{tp: OffsetAndMetadata}``, those it has."""
        return {tp: offset for tp, offset in
                self.admin.list_consumer_group_offsets(group_id).items() if offset.offset >= 0}

    def _topic_partitions(self, topic_args):
        """Kafka's parseTopicPartitionsToReset: ``T:P1,P2`` or every partition of ``T``."""
        partitions = []
        whole = []
        for arg in topic_args:
            if ":" in arg:
                partitions.extend(_topic_partitions(arg))
            else:
                whole.append(arg)
        if whole:
            for described in self.admin.describe_topics(whole):
                partitions.extend(TopicPartition(described["name"], p["partition_index"])
                                  for p in described["partitions"])
        return list(dict.fromkeys(partitions))

    def _check_partitions(self, partitions):
        """Kafka's checkAllTopicPartitionsValid: every partition exists and has a leader."""
        topics = self._topics({tp.topic for tp in partitions})
        missing = [tp for tp in partitions
                   if tp.topic not in topics or tp.partition not in topics[tp.topic]]
        if missing:
            raise CommandFailed("The partitions \"" + ",".join(map(_tp, missing))
                                + "\" do not exist")
        leaderless = [tp for tp in partitions if topics[tp.topic][tp.partition] < 0]
        if leaderless:
            raise CommandFailed("The partitions \"" + ",".join(map(_tp, leaderless))
                                + "\" have no leader")

    def _topics(self, names):
        """``{topic: {partition: leader id}}`` of those of ``names`` that exist."""
        described = {}
        for name in sorted(names):
            try:
                (topic,) = self.admin.describe_topics([name])
            except KafkaError:
                continue
            described[name] = {p["partition_index"]: p["leader_id"]
                               for p in topic["partitions"]}
        return described

    def _clamped(self, requested):
        """Kafka's checkOffsetsRange: offsets beyond the log end or before its start are
        moved there, with a warning."""
        ends = self._log_end_offsets(list(requested))
        starts = self._consumer_call("beginning_offsets", list(requested))
        clamped = {}
        for tp, offset in requested.items():
            if tp in ends and offset > ends[tp]:
                log.warning("New offset (%d) is higher than latest offset for topic partition "
                            "%s. Value will be set to %d.", offset, _tp(tp), ends[tp])
                offset = ends[tp]
            elif tp in starts and offset < starts[tp]:
                log.warning("New offset (%d) is lower than earliest offset for topic partition "
                            "%s. Value will be set to %d.", offset, _tp(tp), starts[tp])
                offset = starts[tp]
            clamped[tp] = offset
        return clamped

    def _offsets_at(self, partitions, timestamp):
        """Kafka's getLogTimestampOffsets: the first offset at or after ``timestamp``; a
        partition without one falls back to its log end, with a warning."""
        found = self._consumer_call("offsets_for_times", {tp: timestamp for tp in partitions})
        offsets = {tp: value.offset for tp, value in found.items() if value is not None}
        empty = [tp for tp in partitions if tp not in offsets]
        for tp in empty:
            print(f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. Falling "
                  f"back to latest known offset.")
        offsets.update(self._log_end_offsets(empty))
        return offsets

    def _log_end_offsets(self, partitions):
        """``{tp: log end offset}`` of the partitions that exist and have a leader."""
        topics = self._topics({tp.topic for tp in partitions})
        known = [tp for tp in partitions
                 if topics.get(tp.topic, {}).get(tp.partition, -1) >= 0]
        return self._consumer_call("end_offsets", known) if known else {}

    def _consumer_call(self, method, partitions):
        if not partitions:
            return {}
        if self._consumer is None:
            self._consumer = KafkaConsumer(bootstrap_servers=self.bootstrap_servers,
                                           client_id=CLIENT_ID)
        return getattr(self._consumer, method)(partitions, timeout_ms=self.args.timeout)


# -- helpers -----------------------------------------------------------------------------------

def _should_print(error, group_id, state, rows):
    """Kafka's shouldPrintMemberState: say why a group prints nothing (or little); a group
    that does not exist is an ``error``."""
    if state == "Dead":
        error(f"Consumer group '{group_id}' does not exist.")
    elif state == "Empty":
        print(f"\nConsumer group '{group_id}' has no active members.", file=sys.stderr)
    elif state in REBALANCING:
        print(f"\nWarning: Consumer group '{group_id}' is rebalancing.", file=sys.stderr)
    elif state != "Stable":
        raise CommandFailed(f"Expected a valid consumer group state, but found '{state}'.")
    return state != "Dead" and rows > 0


def _states(raw):
    """Kafka's groupStatesFromString: comma-separated, case ignored; empty means all."""
    if not raw:
        return set()
    by_name = {s.lower(): s for s in STATES}
    parsed = {by_name.get(s.strip().lower()) for s in raw.split(",")}
    if None in parsed:
        raise ToolError(f"Invalid state list '{raw}'. Valid states are: "
                        + ", ".join(STATES))
    return parsed


def _partitions_of(member):
    """The TopicPartitions assigned to a described member (none if undecodable)."""
    assignment = member.member_assignment
    if not hasattr(assignment, "assignment"):
        return []
    return [TopicPartition(t, p) for t, parts in assignment.assignment for p in parts]


def _with_partitions(members):
    return [m for m in members if _partitions_of(m)]


def _assignment_string(partitions):
    """Kafka's getAssignmentString: ``topic:p1,p2;other:p0``, topics sorted."""
    by_topic = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(sorted(f"{t}:" + ",".join(map(str, sorted(ps)))
                           for t, ps in by_topic.items()))


def _shown(value):
    return MISSING if value is None else str(value)


def _tp(tp):
    """Kafka's TopicPartition.toString: ``topic-partition``."""
    return f"{tp.topic}-{tp.partition}"


def _error_text(error):
    return f"{type(error).__name__}: {error}"


def _topic_partitions(arg):
    """Kafka's parseTopicsWithPartitions: ``topic:0,1,2``."""
    parts = arg.split(":")
    if len(parts) != 2:
        raise ToolError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, partitions = parts
    out = []
    for partition in partitions.split(","):
        try:
            out.append(TopicPartition(topic, int(partition)))
        except ValueError:
            raise ToolError(f"Invalid partition '{partition}' specified in topic arg "
                            f"'{arg}''") from None
    return out


def _read_plan(path, groups):
    """A reset plan CSV: ``topic,partition,offset`` lines when one group is given,
    else ``group,topic,partition,offset``: ``{group: {TopicPartition: offset}}``."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f.read().split("\n") if line.strip()]
    except OSError as exc:
        raise CommandFailed(f"cannot read the reset plan {path!r}: {exc.strerror}") from None
    plan = {}
    single = len(groups) == 1 and lines and len(lines[0].split(",")) == 3
    for line in lines:
        fields = line.split(",")
        try:
            if single:
                group_id, (topic, partition, offset) = groups[0], fields
            else:
                group_id, topic, partition, offset = fields
            plan.setdefault(group_id, {})[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError:
            raise CommandFailed(f"the reset plan {path!r} has a bad line: {line!r}") from None
    return plan


def _datetime_ms(raw):
    """Kafka's Utils.getDateTime: ``yyyy-MM-dd'T'HH:mm:ss.SSS`` and an optional zone (UTC
    without one), in ms since the epoch."""
    zone = _DATETIME.fullmatch(raw).group(1)
    text = raw if zone else raw + "Z"
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    elif re.search(r"[+-]\d{4}$", text):
        text = text[:-2] + ":" + text[-2:]
    moment = datetime.datetime.fromisoformat(text)
    return int(moment.timestamp() * 1000)


def _duration_ms(raw):
    """Java's Duration.parse of ``PnDTnHnMnS`` (signs allowed), in ms."""
    sign, days, hours, minutes, seconds, fraction = _DURATION.fullmatch(raw).groups()
    total = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000
             + int(minutes or 0) * 60_000)
    if seconds is not None:
        ms = int(((fraction or "") + "000")[:3])
        total += int(seconds) * 1000 + (-ms if seconds.startswith("-") else ms)
    return -total if sign == "-" else total
