"""One decision per configuration per job: the ranks of a ``torch.distributed`` job share their
``"fastest"`` decisions through the process group's store.

The extension asks :class:`JobCoordinator` before it decides a configuration (``turn``), after
(``publish``), and when its tuning raised (``abandon``); the coordinator answers from the store of
the process group in use (the default group unless :func:`coordinate` names one). Per
configuration, under a prefix of its own (the SHA-256 of the extension's decision key, which names
the configuration, the settings, the GPU model and the releases, so ranks on different GPU models
never share), the store holds:

- ``decision``: the decision, as the deciding rank's tuning database keeps it; written once, by the
  first rank to publish (``compare_set``), and run by every rank;
- ``claim<r>``: the rank deciding it in round ``r`` (the first to ``compare_set`` it);
- ``abandoned<r>``: round ``r``'s rank gave up (its tuning raised).

A rank meeting a configuration takes its decision if one is published, else claims round 0: the
claimant decides (its tuning database, else a nearby size's decision, else tuning) and publishes,
the others wait. A rank counts its published decisions in ``progress/<rank>``; a waiter whose
claimant published nothing for ``wait_s`` seconds takes it for dead, says so once, and claims the
next round among the living, so a dead rank costs the others one ``wait_s``. A rank never waits
while it holds an undecided claim, so no two ranks wait for each other, and nothing waits in a
collective: ranks may meet different configurations. Waits poll the store (``check``), which
releases the GIL.

:func:`claim_share` is ``tune()``'s part: it claims this rank's share of the configurations
(every ``world_size``-th of them, sorted by key) before the first is tuned, so that the shares are
decided side by side.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from . import _warn

__all__ = ["DEFAULT_WAIT_S", "ENV_VAR", "Coordination", "JobCoordinator", "begin_retune", "claim_share",
           "coordinate", "coordination", "install", "release_claims", "sharing_counts"]

ENV_VAR = "TORCH_CUDNN_ALGO_DISTRIBUTED"
# Far more than one configuration's decision takes (a few seconds with runtime compilation), so a
# living claimant is never taken for dead; it bounds what a dead rank costs the others.
DEFAULT_WAIT_S = 60.0
_PREFIX = "torch_cudnn_algo/decisions/v1"
_POLL_S = (0.0005, 0.02)  # first and longest pause between two looks at the store
_COUNTS = ("claimed", "shared", "adopted", "waited", "given_up")


@dataclasses.dataclass(frozen=True)
class Coordination:
    """How this process shares ``"fastest"`` decisions with the other ranks of its job
    (:func:`coordination`)."""

    enabled: bool  #: whether a job's ranks share decisions (:func:`coordinate`; ``TORCH_CUDNN_ALGO_DISTRIBUTED``)
    group: Any  #: the process group whose store carries them; None: the default group
    wait_s: float  #: how long a rank waits for a claimant that publishes nothing before deciding itself
    active: bool  #: whether they are shared now (enabled, a process group initialised, this rank in it)
    rank: int | None  #: this process's rank in the group, when active
    world_size: int | None  #: the group's size, when active


class JobCoordinator:
    """The protocol of the module docstring over one process group's store. Thread-safe: the
    autograd thread and the main thread may decide different configurations at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.enabled = _enabled_from_environment()
        self.group: Any = None
        self.wait_s = DEFAULT_WAIT_S
        self.retune_round = 0  # tune(retune=True) calls of this process: each retunes in its own scope
        self._held: dict[str, int] = {}  # store prefix -> the round this rank claimed and has not published
        self._dead: set[int] = set()  # ranks taken for dead
        self._broken: str | None = None  # why the store failed (then every rank decides alone)
        self._store: Any = None
        self._store_of: Any = None  # the process group _store was made for
        self._counts = dict.fromkeys(_COUNTS, 0)

    # -- settings ------------------------------------------------------------------------------

    def configure(self, enabled: bool, group: Any, wait_s: float) -> None:
        with self._lock:
            self.enabled, self.group, self.wait_s = enabled, group, wait_s
            self._store = self._store_of = None
            self._dead.clear()
            self._broken = None

    def state(self) -> Coordination:
        job = self._job()
        return Coordination(self.enabled, self.group, self.wait_s, job is not None,
                            None if job is None else job[1], None if job is None else job[2])

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    # -- the extension's questions -------------------------------------------------------------

    def __call__(self, op: str, scope: str, key: str, payload: bytes | None) -> bytes | str | None:
        """``turn``: the job's decision (bytes), ``"decide"`` (this rank decides and publishes), or
        None (no job: decide alone). ``publish``: the job's decision after this rank published its
        own. ``abandon``: None. Store failures never escape: they turn sharing off, once said."""
        job = self._job()
        if job is None:
            return None
        store, rank, _ = job
        base = self.prefix(scope, key)
        try:
            if op == "turn":
                return self._turn(store, rank, base)
            if op == "publish":
                return self._publish(store, rank, base, payload or b"")
            if op == "abandon":
                self._abandon(store, base)
                return None
        except Exception as exc:  # noqa: BLE001 - a store that failed must not fail a convolution
            self._give_up_store(exc)
            return None
        raise ValueError(f"unknown job coordinator operation {op!r}; operations are turn, publish, abandon")

    def prefix(self, scope: str, key: str) -> str:
        if scope == "retune":
            scope = f"retune{self.retune_round}"
        return f"{_PREFIX}/{scope}/{hashlib.sha256(key.encode()).hexdigest()[:40]}"

    def claim(self, store: Any, rank: int, base: str) -> str:
        """``tune()``'s claim ahead: ``"decided"`` (a decision is published), ``"mine"`` (this rank
        holds round 0 and decides it when the extension asks) or ``"theirs"``."""
        if store.check([f"{base}/decision"]):
            return "decided"
        return "mine" if self._claim_round(store, rank, base, 0) == rank else "theirs"

    # -- the protocol --------------------------------------------------------------------------

    def _turn(self, store: Any, rank: int, base: str) -> bytes | str:
        with self._lock:
            if base in self._held:
                return "decide"
        decision = f"{base}/decision"
        waited = False
        for round_ in range(self._max_rounds()):
            if store.check([decision]):
                return self._adopt(store.get(decision), waited)
            holder = self._claim_round(store, rank, base, round_)
            if holder == rank:
                return "decide"
            if holder in self._dead_ranks():
                continue
            waited = True
            outcome = self._wait(store, base, round_, holder)
            if isinstance(outcome, bytes):
                return self._adopt(outcome, waited)
            if outcome == "dead":
                self._take_for_dead(holder)
        # Every round's claimant died or gave up: this rank decides, and the first to publish wins.
        return "decide"

    def _claim_round(self, store: Any, rank: int, base: str, round_: int) -> int:
        """The rank holding round ``round_`` of ``base``: this one if it claimed it now."""
        holder = int(store.compare_set(f"{base}/claim{round_}", "", str(rank)))
        if holder == rank:
            with self._lock:
                self._held[base] = round_
                self._counts["claimed"] += 1
        return holder

    def _wait(self, store: Any, base: str, round_: int, holder: int) -> bytes | str:
        """The decision, ``"abandoned"``, or ``"dead"``: the holder published nothing for ``wait_s``."""
        decision, abandoned, progress = f"{base}/decision", f"{base}/abandoned{round_}", f"{_PREFIX}/progress/{holder}"
        seen = store.add(progress, 0)
        deadline = time.monotonic() + self.wait_s
        pause = _POLL_S[0]
        while True:
            if store.check([decision]):
                return store.get(decision)
            if store.check([abandoned]):
                return "abandoned"
            now = time.monotonic()
            published = store.add(progress, 0)
            if published != seen:  # the holder is alive and deciding: its share takes time
                seen, deadline = published, now + self.wait_s
            elif now >= deadline:
                return "dead"
            time.sleep(pause)
            pause = min(pause * 2, _POLL_S[1])

    def _publish(self, store: Any, rank: int, base: str, payload: bytes) -> bytes:
        job_decision = store.compare_set(f"{base}/decision", "", payload)
        store.add(f"{_PREFIX}/progress/{rank}", 1)
        with self._lock:
            self._held.pop(base, None)
            self._counts["shared"] += 1
        return job_decision

    def _abandon(self, store: Any, base: str) -> None:
        with self._lock:
            round_ = self._held.pop(base, None)
        if round_ is not None:
            store.set(f"{base}/abandoned{round_}", b"1")

    def _adopt(self, decision: bytes, waited: bool) -> bytes:
        with self._lock:
            self._counts["adopted"] += 1
            self._counts["waited"] += int(waited)
        return decision

    def _take_for_dead(self, rank: int) -> None:
        with self._lock:
            first = rank not in self._dead
            self._dead.add(rank)
            if first:
                self._counts["given_up"] += 1
        if first:
            _warn.warn(f"torch_cudnn_algo: rank {rank} published no decision for {self.wait_s:g} s; the other "
                       f"ranks decide the configurations it claimed (torch_cudnn_algo.distributed.coordinate "
                       f"sets the wait)", stacklevel=2)

    def _dead_ranks(self) -> set[int]:
        with self._lock:
            return set(self._dead)

    def _max_rounds(self) -> int:
        job = self._job()
        return 1 + (job[2] if job is not None else 1)

    # -- the store -----------------------------------------------------------------------------

    def _job(self) -> tuple[Any, int, int] | None:
        """(store, rank, world size) when decisions are shared now, else None."""
        if not self.enabled or self._broken is not None:
            return None
        try:
            import torch.distributed as dist
            if not (dist.is_available() and dist.is_initialized()):
                return None
            group = self.group if self.group is not None else dist.group.WORLD
            if _outside(group):
                return None
            rank = dist.get_rank(group)
            world_size = dist.get_world_size(group)
        except Exception:  # noqa: BLE001 - a destroyed group, say: no job to share with
            return None
        if rank < 0 or world_size < 2:
            return None
        with self._lock:
            if self._store is None or self._store_of is not group:
                from torch.distributed import distributed_c10d
                self._store = distributed_c10d._get_process_group_store(group)
                self._store_of = group
            return self._store, rank, world_size

    def _give_up_store(self, exc: BaseException) -> None:
        with self._lock:
            first = self._broken is None
            self._broken = f"{type(exc).__name__}: {exc}"
            self._held.clear()
        if first:
            _warn.warn(f"torch_cudnn_algo: the process group's store failed ({self._broken}); from now on "
                       f"this rank decides its configurations alone", stacklevel=2)


def _outside(group: Any) -> bool:
    """Whether ``group`` is what ``torch.distributed.new_group`` returns on a rank outside the group."""
    import torch.distributed as dist
    return group is dist.GroupMember.NON_GROUP_MEMBER


def _enabled_from_environment() -> bool:
    value = os.environ.get(ENV_VAR, "")
    if value in ("", "1"):
        return True
    if value == "0":
        return False
    _warn.warn(f"torch_cudnn_algo: {ENV_VAR}={value!r} is not 0 or 1; the ranks of a job share decisions "
               f"(the default)", stacklevel=3)
    return True


_COORDINATOR = JobCoordinator()


def install() -> None:
    """Hands the coordinator to the extension."""
    from . import _ops
    _ops.set_job_coordinator(_COORDINATOR)


def coordinate(enabled: bool = True, *, group: Any = None, wait_s: float = DEFAULT_WAIT_S) -> None:
    """Whether and how the ranks of a ``torch.distributed`` job share their ``"fastest"``
    decisions (on by default, ``TORCH_CUDNN_ALGO_DISTRIBUTED=0`` turns the default off): with a
    process group initialised, each configuration is decided by one rank (the first to meet it;
    ``tune()`` splits its configurations among the ranks) and every rank runs that decision.
    ``group``: the process group whose ranks share (default: every rank of the job); a rank outside
    it (where ``new_group`` returned no group) decides alone. ``wait_s``: how long a rank waits for a rank that claimed a configuration and
    publishes nothing before it decides the configuration itself (a dead rank costs the others
    that once). Raises ValueError, changing nothing, on a bad value."""
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled must be True or False, got {enabled!r}")
    if not (isinstance(wait_s, (int, float)) and not isinstance(wait_s, bool) and 0 < wait_s < float("inf")):
        raise ValueError(f"wait_s must be a number of seconds > 0, got {wait_s!r}")
    if group is not None:
        import torch.distributed as dist
        if not dist.is_available() or not (isinstance(group, dist.ProcessGroup) or _outside(group)):
            raise ValueError(f"group must be a torch.distributed.ProcessGroup, what new_group returns on a rank "
                             f"outside the group, or None (the default group), got {group!r}")
    _COORDINATOR.configure(enabled, group, float(wait_s))


def coordination() -> Coordination:
    """The settings of :func:`coordinate`, and whether decisions are shared now."""
    return _COORDINATOR.state()


def sharing_counts() -> dict[str, int]:
    """Since the process started: configurations this rank claimed (``"claimed"``), decisions it
    published for the job (``"shared"``), decisions of other ranks it runs (``"adopted"``; of them
    ``"waited"`` were not yet published when it asked), and ranks it took for dead
    (``"given_up"``)."""
    return _COORDINATOR.counts()


def claim_share(keys: Sequence[str], scope: str) -> list[bool] | None:
    """``tune()``'s split: for each decision key, whether this rank claimed it (its share: every
    ``world_size``-th key in sorted order, unless already published or claimed); None when
    decisions are not shared now. The claims are decided when the extension asks for them."""
    job = _COORDINATOR._job()
    if job is None:
        return None
    store, rank, world_size = job
    mine = [False] * len(keys)
    try:
        for position, index in enumerate(sorted(range(len(keys)), key=lambda i: keys[i])):
            if position % world_size == rank:
                mine[index] = _COORDINATOR.claim(store, rank, _COORDINATOR.prefix(scope, keys[index])) == "mine"
    except Exception as exc:  # noqa: BLE001
        _COORDINATOR._give_up_store(exc)
        return None
    return mine


def begin_retune() -> None:
    """tune(retune=True) decides again, in a scope of its own (every rank calls tune alike)."""
    _COORDINATOR.retune_round += 1


def release_claims(keys: Sequence[str], scope: str) -> None:
    """Abandons the claims of ``keys`` this rank still holds (a tune() that stopped early)."""
    job = _COORDINATOR._job()
    if job is None:
        return
    try:
        for key in keys:
            _COORDINATOR._abandon(job[0], _COORDINATOR.prefix(scope, key))
    except Exception as exc:  # noqa: BLE001
        _COORDINATOR._give_up_store(exc)
