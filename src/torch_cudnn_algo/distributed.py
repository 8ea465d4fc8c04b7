"""One decision per configuration per job: with a ``torch.distributed`` process group
initialised, the ranks share their ``"fastest"`` decisions through the group's store. Each
configuration is decided by one rank (the first to meet it on the fly; :func:`torch_cudnn_algo.tune`
splits the step's configurations among the ranks), every rank runs that decision and keeps it in
its tuning database, and a rank that dies while deciding costs the others one bounded wait.
Sharing is on by default; ``TORCH_CUDNN_ALGO_DISTRIBUTED=0`` turns the default off, and
:func:`coordinate` sets it in a program::

    import torch.distributed as dist
    import torch_cudnn_algo

    dist.init_process_group("nccl")
    torch_cudnn_algo.distributed.coordinate(wait_s=120)   # or coordinate(False): each rank alone
    torch.backends.cudnn.conv_fwd_algo = "fastest"        # ... and the backward flags

docs/distributed.md describes the protocol, subgroups, GPUs of different models and the bounds.
"""

from __future__ import annotations

from ._distributed import DEFAULT_WAIT_S, Coordination, coordinate, coordination, sharing_counts

__all__ = [
    "DEFAULT_WAIT_S",
    "Coordination",
    "coordinate",
    "coordination",
    "sharing_counts",
]
