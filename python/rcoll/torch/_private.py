"""Every private torch API the backend relies on, in one place (torch 2.15.0, pinned in
python/requirements-test.txt). Each may change between torch releases; check here first
when a new torch breaks the backend.
"""

import torch._C._distributed_c10d as _c10d

#: The C++ ``c10d::Backend``, subclassable from Python since torch 2.15 (the trampoline
#: ``PyBackend`` in ``torch/csrc/distributed/c10d/py/PyBackend.hpp``): a subclass's methods
#: named ``allreduce``, ``all_gather_single``, ``all_to_all_single``, ... serve the process
#: group's calls, and ``supports_splitting``/``split`` serve ``dist.split_group``.
Backend = _c10d.Backend

#: The C++ ``c10d::Work`` (public as ``dist.Work`` but documented only as a return type): a
#: subclass overrides ``wait(timeout)`` and ``get_future()``, the two calls the trampoline
#: forwards (``PyProcessGroup::PyWork``).
Work = _c10d.Work

#: Options objects the backend's methods receive (fields ``reduceOp``, ``rootRank``,
#: ``rootTensor``, ``timeout``): their types, for annotations only.
AllreduceOptions = _c10d.AllreduceOptions

#: ``dist.Backend.register_backend``'s ``extended_api=True`` form passes the creator a
#: ``_DistributedBackendOptions`` (``store``, ``group_rank``, ``group_size``, ``timeout``,
#: ``global_ranks_in_group``) and the user's backend options.
DistributedBackendOptions = _c10d._DistributedBackendOptions

#: ``ReduceOp.RedOpType``: the kind of a ``ReduceOp`` (``opts.reduceOp.op``).
RedOpType = _c10d.ReduceOp.RedOpType

#: ``c10d::Backend::Options`` (``backend`` name, ``_timeout``). A Python subclass must
#: override the ``options`` property, and every ``supports_*`` property the trampoline
#: reads (``supports_splitting``, ``supports_coalescing``, ``supports_shrinking``,
#: ``supports_reconfigure``, ``supports_window``, ``_supports_time_estimate``): it reads
#: the attribute through Python, and the inherited one calls the trampoline again
#: (endless recursion in torch 2.15, seen on ``dist.split_group`` and
#: ``dist.batch_isend_irecv``).
BackendOptions = _c10d.Backend.Options

#: What a Python backend cannot change in torch 2.15 (so torch's tests that check these
#: are listed as skipped in python/tests_torch/distributed_suite.txt):
#: - ``Work.is_completed()`` is always False: torch wraps a Python Work in
#:   ``PyWorkHolder``, which forwards ``wait`` and ``get_future`` only.
#: - DDP's logging names the backend "custom" (``ProcessGroup::getBackendName`` of a
#:   plugin's ``BackendType.CUSTOM``), not "rcoll".
