"""FindCoordinator v0-2, JoinGroup v2-5, SyncGroup v1-3, Heartbeat v1-3, LeaveGroup v1-3,
DescribeGroups v0-4, ListGroups v0-2, DeleteGroups v0-1: group membership and
administration, decoded here and decided by the broker's ``GroupCoordinator``
(``group_coordinator.runtime``).

- FindCoordinator: ``key_type`` 0 (a group) names the leader of the group's
  ``__consumer_offsets`` partition, described as Metadata describes brokers (``host`` the
  broker's listener name, ``port`` its id); the first one creates the topic
  (COORDINATOR_NOT_AVAILABLE until it has a leader). ``key_type`` 1 (a transactional id)
  names the leader of the id's ``__transaction_state`` partition the same way
  (``transaction_coordinator.runtime``). Errors answer node -1, host "", port -1 (Kafka's
  ``Node.noNode()``).
- JoinGroup and SyncGroup park their channel (``delayed_response``) until the
  coordinator's ``respond``; JoinGroup v4+ requires a known member id (KIP-394). A member's
  ``client_host`` is ``CLIENT_HOST``: clients are processes on this host, connected through
  shared memory, with no address of their own.
- DeleteGroups parks until the groups' tombstones are stored; the others answer at once.
- LeaveGroup v1-2 leave one member (``member_id``); their top-level error is the
  member's, as Kafka answers them.

Every group request makes sure ``__consumer_offsets`` exists (created on first use).

Owner: the broker's loop thread.
"""
from __future__ import annotations

import datetime

from cluster.errors import InvalidRequestError
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.delayed_response import DelayedResponse
from replica_proc.responses import NO_THROTTLE, build, encoder, error, module
from shm_ring.naming import listener_name

#: FindCoordinator's key types (Kafka's CoordinatorType).
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1
#: ``client_host`` of every member (see the module doc).
CLIENT_HOST = "/127.0.0.1"
#: DescribeGroups' ``authorized_operations`` when not asked for (Kafka's Integer.MIN_VALUE).
NO_AUTHORIZED_OPERATIONS = -2**31
_MS = datetime.timedelta(milliseconds=1)


class GroupHandler:
    """The membership and group-administration APIs over ``runtime`` (a GroupRuntime);
    ``transactions``: the TransactionRuntime (FindCoordinator of a transactional id);
    ``metadata``: the BrokerMetadata (FindCoordinator's broker description); ``clock``:
    the loop's monotonic seconds."""

    def __init__(self, runtime, transactions, metadata, clock):
        self._runtime = runtime
        self._transactions = transactions
        self._coordinator = runtime.coordinator
        self._metadata = metadata
        self._clock = clock

    def handlers(self):
        """{ApiKey: handler(channel, header, request)}."""
        return {
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
        }

    @staticmethod
    def _send(channel, header, response):
        channel.send(protocol.encode_response(response, header.correlation_id))

    # -- FindCoordinator --------------------------------------------------------------------

    def find_coordinator(self, channel, header, request):
        classes = module(ApiKey.FIND_COORDINATOR, header.request_api_version)
        key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
        node = -1
        if key_type == GROUP_KEY_TYPE:
            code, message, node = self._runtime.coordinator_node(request.key)
        elif key_type == TRANSACTION_KEY_TYPE:
            code, message, node = self._transactions.coordinator_node(request.key)
        else:
            code, message = InvalidRequestError.errno, f"unknown key type {key_type}"
        self._send(channel, header, build(
            classes.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=error(code),
            error_message=message, node_id=node,
            host=listener_name(self._metadata.namespace, node) if node >= 0 else "",
            port=node if node >= 0 else -1))

    # -- membership -------------------------------------------------------------------------

    def join_group(self, channel, header, request):
        self._runtime.topic()
        version = header.request_api_version
        classes = module(ApiKey.JOIN_GROUP, version)

        def respond(result):
            members = tuple(build(classes.JoinGroupResponseMember, member_id=m.member_id,
                                  group_instance_id=m.group_instance_id, metadata=m.metadata)
                            for m in result.members)
            parked.send(encoder(header, build(
                classes.JoinGroupResponse, throttle_time=NO_THROTTLE,
                error_code=error(result.error), generation_id=result.generation,
                protocol_name=result.protocol_name or "", leader=result.leader,
                member_id=result.member_id, members=members)))

        parked = DelayedResponse(channel)
        self._coordinator.join_group(
            self._clock(), request.group_id, request.member_id,
            getattr(request, "group_instance_id", None), header.client_id or "", CLIENT_HOST,
            request.session_timeout // _MS, request.rebalance_timeout // _MS,
            request.protocol_type, [(p.name, p.metadata) for p in request.protocols],
            version >= 4, respond)

    def sync_group(self, channel, header, request):
        self._runtime.topic()
        classes = module(ApiKey.SYNC_GROUP, header.request_api_version)

        def respond(result):
            parked.send(encoder(header, build(
                classes.SyncGroupResponse, throttle_time=NO_THROTTLE,
                error_code=error(result.error), assignment=result.assignment)))

        parked = DelayedResponse(channel)
        self._coordinator.sync_group(
            self._clock(), request.group_id, request.generation_id, request.member_id,
            getattr(request, "group_instance_id", None), None, None,
            {a.member_id: a.assignment for a in request.assignments}, respond)

    def heartbeat(self, channel, header, request):
        self._runtime.topic()
        classes = module(ApiKey.HEARTBEAT, header.request_api_version)
        code = self._coordinator.heartbeat(
            self._clock(), request.group_id, request.generation_id, request.member_id,
            getattr(request, "group_instance_id", None))
        self._send(channel, header, build(classes.HeartbeatResponse, throttle_time=NO_THROTTLE,
                                          error_code=error(code)))

    def leave_group(self, channel, header, request):
        self._runtime.topic()
        version = header.request_api_version
        classes = module(ApiKey.LEAVE_GROUP, version)
        if version >= 3:
            members = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            members = [(request.member_id, None)]
        code, answers = self._coordinator.leave_group(self._clock(), request.group_id,
                                                      members)
        if version < 3 and code == 0 and answers:
            code = answers[0][2]
        members = () if version < 3 else tuple(
            build(classes.MemberResponse, member_id=m, group_instance_id=i,
                  error_code=error(e)) for m, i, e in answers)
        self._send(channel, header, build(
            classes.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error(code),
            members=members))

    # -- administration ---------------------------------------------------------------------

    def describe_groups(self, channel, header, request):
        self._runtime.topic()
        version = header.request_api_version
        classes = module(ApiKey.DESCRIBE_GROUPS, version)
        groups = tuple(build(
            classes.DescribedGroup, error_code=error(g.error), group_id=g.group_id,
            group_state=g.state, protocol_type=g.protocol_type, protocol_data=g.protocol,
            members=tuple(build(
                classes.DescribedGroupMember, member_id=m.member_id,
                group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata,
                member_assignment=m.assignment) for m in g.members),
            authorized_operations=NO_AUTHORIZED_OPERATIONS)
            for g in self._coordinator.describe_groups(request.groups, version))
        self._send(channel, header, build(classes.DescribeGroupsResponse,
                                          throttle_time=NO_THROTTLE, groups=groups))

    def list_groups(self, channel, header, request):
        self._runtime.topic()
        classes = module(ApiKey.LIST_GROUPS, header.request_api_version)
        code, groups = self._coordinator.list_groups()
        self._send(channel, header, build(
            classes.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=error(code),
            groups=tuple(build(classes.ListedGroup, group_id=g.group_id,
                               protocol_type=g.protocol_type) for g in groups)))

    def delete_groups(self, channel, header, request):
        self._runtime.topic()
        classes = module(ApiKey.DELETE_GROUPS, header.request_api_version)
        names = list(dict.fromkeys(request.groups_names))

        def respond(answers):
            parked.send(encoder(header, build(
                classes.DeleteGroupsResponse, throttle_time=NO_THROTTLE,
                results=tuple(build(classes.DeletableGroupResult, group_id=name,
                                    error_code=error(answers[name])) for name in names))))

        parked = DelayedResponse(channel)
        self._coordinator.delete_groups(names, respond)
