"""rcoll: collective communication for CPU memory, with mpi4py's buffer API.

Run one process per rank under a launcher (torchrun, mpirun, srun) or with ``RCOLL_RANK``,
``RCOLL_WORLD_SIZE``, ``RCOLL_ROOT_ADDR`` and ``RCOLL_UNIQUE_ID`` set, then::

    import numpy as np
    import rcoll

    comm = rcoll.init()
    x = np.full(4, comm.rank, dtype=np.float32)
    comm.Allreduce(rcoll.IN_PLACE, x, op=rcoll.SUM)

Everything here is the native module ``rcoll._rcoll`` (see ``__init__.pyi``).
"""

from ._rcoll import (
    AVG,
    BAND,
    BOR,
    BXOR,
    IN_PLACE,
    MAX,
    MIN,
    PROD,
    SUM,
    Comm,
    Error,
    InPlace,
    InvalidArgumentError,
    MismatchError,
    Op,
    PeerError,
    Request,
    TimeoutError,
    __version__,
    init,
)

__all__ = [
    "AVG",
    "BAND",
    "BOR",
    "BXOR",
    "IN_PLACE",
    "MAX",
    "MIN",
    "PROD",
    "SUM",
    "Comm",
    "Error",
    "InPlace",
    "InvalidArgumentError",
    "MismatchError",
    "Op",
    "PeerError",
    "Request",
    "TimeoutError",
    "__version__",
    "init",
]
