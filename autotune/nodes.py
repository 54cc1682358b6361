"""Multi-node trials: one trial trained by ``num_nodes`` machines at once, coordinated through the study.

With ``--num-nodes N`` every trial is one Lightning DDP run over N nodes (``Trainer(num_nodes=N)``).
The N ``autotune`` processes of a *node group* (one per node) share the work like this:

* node rank 0 (the *leader*: ``autotune search``, or a ``worker`` with node rank 0) takes trials from
  the study's queue as any worker does; for each one it publishes a *launch* (the trial spec, its own
  address and a free port) in the study's system attributes, then starts its own ranks;
* every other node (a *follower*: ``autotune worker --node-rank K``) waits for its group's next
  launch, starts its ranks of the same trial with ``NODE_RANK=K``, ``MASTER_ADDR`` and
  ``MASTER_PORT`` (Lightning's ``LightningEnvironment`` reads these), and stores its rank reports
  back in the study;
* the leader merges every node's rank reports into the trial's figures (the slowest rank decides) and
  tells the study. A node that never joins makes the trial time out, with a reason that names it.

The study storage (PostgreSQL for real clusters) is the only channel: nothing else needs to be
reachable between nodes except the ``MASTER_ADDR:MASTER_PORT`` rendezvous that torch.distributed
itself needs. Node rank and group come from ``--node-rank``/``--node-group``, else the environment
(``NODE_RANK`` or ``SLURM_NODEID``; ``AUTOTUNE_NODE_GROUP`` or ``SLURM_JOB_ID``).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.errors import FailKind, UsageError
from autotune.ui import UI

__all__ = ["LeaderChannel", "NodeIdentity", "follow", "node_identity"]

#: Seconds the leader waits for the other nodes' reports after its own ranks ended.
RESULT_WAIT = 120.0
#: Seconds a follower lets its ranks run on after the leader's ranks ended (then they are killed).
FOLLOWER_GRACE = 30.0
#: Seconds a follower keeps waiting while the study has no waiting or running trial.
IDLE_EXIT = 120.0
_POLL = 0.5


@dataclass(frozen=True)
class NodeIdentity:
    """Where this process sits in a multi-node trial.

    Attributes:
        node_rank: 0 for the leader, 1..num_nodes-1 for the others.
        group: Name shared by the processes that train the same trials.
        master_addr: Address the other nodes reach this node at (leader only).
    """

    node_rank: int
    group: str
    master_addr: str

    @property
    def key(self) -> str:
        return f"autotune:nodes:{self.group}"


def node_identity(num_nodes: int, node_rank: int | None = None, group: str | None = None) -> NodeIdentity:
    """This process's node rank and group, from the arguments or else the environment.

    Args:
        num_nodes: Nodes per trial (>= 1).
        node_rank: ``--node-rank``; default ``$NODE_RANK``, else ``$SLURM_NODEID``, else 0.
        group: ``--node-group``; default ``$AUTOTUNE_NODE_GROUP``, else ``$SLURM_JOB_ID``, else ``default``.

    Raises:
        UsageError: The node rank is not an integer in ``[0, num_nodes)``.
    """
    raw = node_rank if node_rank is not None else os.environ.get("NODE_RANK", os.environ.get("SLURM_NODEID", "0"))
    try:
        rank = int(raw)
    except (TypeError, ValueError):
        raise UsageError(f"node rank {raw!r} is not an integer; give --node-rank K with 0 <= K < {num_nodes}") from None
    if not 0 <= rank < num_nodes:
        raise UsageError(
            f"node rank {rank} is outside 0..{num_nodes - 1} for --num-nodes {num_nodes}; give --node-rank K with 0 <= K < {num_nodes}"
        )
    name = group or os.environ.get("AUTOTUNE_NODE_GROUP") or os.environ.get("SLURM_JOB_ID") or "default"
    addr = os.environ.get("MASTER_ADDR") or socket.getfqdn()
    return NodeIdentity(rank, str(name), addr)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _system_attrs(study) -> dict[str, Any]:
    from autotune.optuna_compat import study_system_attrs

    return study_system_attrs(study)


def _set(study, key: str, value: Any) -> None:
    from autotune.optuna_compat import set_study_system_attr

    set_study_system_attr(study, key, value)


class LeaderChannel:
    """The leader's side: publish each launch, then gather the other nodes' reports.

    Args:
        study: The study (its storage carries the messages).
        identity: This process's :class:`NodeIdentity` (node rank 0).
        num_nodes: Nodes per trial (>= 2).
    """

    def __init__(self, study, identity: NodeIdentity, num_nodes: int):
        self.study = study
        self.identity = identity
        self.num_nodes = num_nodes

    def publish(self, trial_number: int, spec: Mapping[str, Any], timeout: float) -> tuple[str, dict[str, str]]:
        """Announce a trial to the group. Returns the launch id and the leader's rendezvous environment."""
        launch = uuid.uuid4().hex[:12]
        port = _free_port()
        _set(
            self.study,
            self.identity.key,
            {
                "launch": launch,
                "trial": trial_number,
                "spec": dict(spec),
                "timeout": timeout,
                "num_nodes": self.num_nodes,
                "master_addr": self.identity.master_addr,
                "master_port": port,
                "ended": False,
            },
        )
        return launch, {"NODE_RANK": "0", "MASTER_ADDR": self.identity.master_addr, "MASTER_PORT": str(port)}

    def ended(self, launch: str) -> None:
        """Tell the followers that the leader's ranks of ``launch`` have exited."""
        record = dict(_system_attrs(self.study).get(self.identity.key) or {})
        if record.get("launch") == launch:
            record["ended"] = True
            _set(self.study, self.identity.key, record)

    def gather(self, launch: str, outcome, wait: float = RESULT_WAIT):
        """Merge the other nodes' rank reports into the leader's ``outcome`` (a ``TrialOutcome``).

        A node that sent no report within ``wait`` seconds (or never joined) fails the trial with a
        reason naming the node; a node whose ranks failed fails it with that node's reason.
        """
        self.ended(launch)
        deadline = time.monotonic() + (wait if outcome.ok else min(wait, 10.0))
        others = range(1, self.num_nodes)
        reports: dict[int, dict[str, Any]] = {}
        while True:
            attrs = _system_attrs(self.study)
            for k in others:
                got = attrs.get(f"{self.identity.key}:{launch}:{k}")
                if got and "ranks" in got:
                    reports[k] = got
            if len(reports) == len(others) or time.monotonic() > deadline:
                break
            time.sleep(_POLL)
        joined = {k for k in others if k in reports or attrs.get(f"{self.identity.key}:{launch}:{k}")}
        for k in others:
            outcome.ranks.extend(reports.get(k, {}).get("ranks", []))
        if not outcome.ok:
            missing = [k for k in others if k not in joined]
            if missing:
                outcome.fail_reason = (
                    f"{outcome.fail_reason}; node rank(s) {missing} of group {self.identity.group!r} never joined "
                    f"(start `autotune worker --node-rank K --node-group {self.identity.group}` on each other node)"
                )
            return outcome
        for k in others:
            report = reports.get(k)
            if report is None:
                outcome.ok, outcome.fail_kind = False, FailKind.NODE_LOST
                outcome.fail_reason = (
                    f"node_lost: node rank {k} of group {self.identity.group!r} sent no report within {wait:g} s after node 0 ended"
                )
                return outcome
            if report.get("fail_kind"):
                outcome.ok, outcome.fail_kind = False, FailKind(report["fail_kind"])
                outcome.fail_reason = f"node rank {k} ({report.get('host', '?')}): {report['fail_reason']}"
                outcome.log_tail = report.get("log_tail", "")
                return outcome
        return outcome

    def close(self) -> None:
        """Tell the followers that no more trials come from this leader."""
        _set(self.study, self.identity.key, {"launch": None, "done": True, "time": time.time()})


def follow(study, identity: NodeIdentity, ui: UI, *, devices: int, timeout: float | None = None) -> int:
    """Run this node's ranks of every trial the group's leader launches (``autotune worker --node-rank K``).

    Returns when the leader says it is done, after ``timeout`` seconds, or when the study has had no
    waiting or running trial for :data:`IDLE_EXIT` seconds.

    Returns:
        Trials this node took part in.
    """
    from autotune.runner import run_trial_process

    began = time.time()
    seen: set[str] = set()
    start = time.monotonic()
    idle_since: float | None = None
    done = 0
    # a launch that is already running when this node arrives is still joinable: the leader waits for us
    while timeout is None or time.monotonic() - start < timeout:
        record = _system_attrs(study).get(identity.key) or {}
        if record.get("done") and record.get("time", 0) >= began:
            break  # the leader finished after this node started
        launch = record.get("launch")
        if launch and launch not in seen and not record.get("ended"):
            seen.add(launch)
            idle_since = None
            done += 1
            ui.info(f"node {identity.node_rank}: trial {record['trial']} with node 0 at {record['master_addr']}:{record['master_port']}")
            _set(study, f"{identity.key}:{launch}:{identity.node_rank}", {"joined": time.time(), "host": socket.gethostname()})
            env = {
                "NODE_RANK": str(identity.node_rank),
                "MASTER_ADDR": str(record["master_addr"]),
                "MASTER_PORT": str(record["master_port"]),
            }
            stop = threading.Event()

            def started(pgid: int, launch=launch, stop=stop) -> None:
                threading.Thread(target=_kill_when_leader_ends, args=(study, identity.key, launch, pgid, stop), daemon=True).start()

            try:
                outcome = run_trial_process(
                    record["spec"],
                    timeout=float(record["timeout"]),
                    trial_number=int(record["trial"]),
                    expected_ranks=devices,
                    devices=devices,
                    slot_env=env,
                    on_start=started,
                )
            finally:
                stop.set()
            _set(
                study,
                f"{identity.key}:{launch}:{identity.node_rank}",
                {
                    "ranks": outcome.ranks,
                    "fail_kind": outcome.fail_kind,
                    "fail_reason": outcome.fail_reason,
                    "log_tail": outcome.log_tail[-4000:],
                    "host": socket.gethostname(),
                },
            )
            state = "ok" if outcome.ok else outcome.fail_reason
            ui.info(f"node {identity.node_rank}: trial {record['trial']} ended: {state}")
            continue
        active = any(t.state.name in ("WAITING", "RUNNING") for t in study.get_trials(deepcopy=False))
        if active:
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > IDLE_EXIT:
            break
        time.sleep(_POLL)
    return done


def _kill_when_leader_ends(study, key: str, launch: str, pgid: int, stop: threading.Event) -> None:
    """Kill this node's ranks when node 0's ranks ended :data:`FOLLOWER_GRACE` seconds ago (a peer
    that died leaves DDP collectives waiting for it until the process-group timeout)."""
    from autotune.runner import kill_group

    ended_at: float | None = None
    while not stop.wait(1.0):
        record = _system_attrs(study).get(key) or {}
        if record.get("launch") != launch or record.get("ended"):
            ended_at = ended_at or time.monotonic()
            if time.monotonic() - ended_at > FOLLOWER_GRACE:
                kill_group(pgid)
                return
