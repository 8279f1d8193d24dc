"""rcoll as a torch.distributed backend: ``import rcoll.torch`` registers ``"rcoll"`` for
CPU tensors, so that under torchrun::

    import torch.distributed as dist
    import rcoll.torch  # noqa: F401

    dist.init_process_group("rcoll")

runs every collective of the default group (and of groups made with ``dist.new_group`` or
``dist.split_group``) on rcoll. See python/README.md for what is served.
"""

import torch.distributed as _dist

from ._backend import RcollBackend, create

if "rcoll" not in _dist.Backend._plugins and "RCOLL" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("rcoll", create, extended_api=True, devices=["cpu"])

__all__ = ["RcollBackend", "create"]
