"""rcoll: collective communication for CPU memory, with mpi4py's buffer API.

Run one process per rank under a launcher (torchrun, mpirun, srun) or with ``RCOLL_RANK``,
``RCOLL_WORLD_SIZE``, ``RCOLL_ROOT_ADDR`` and ``RCOLL_UNIQUE_ID`` set, then::

    import numpy as np
    import rcoll

    comm = rcoll.init()
    x = np.full(4, comm.rank, dtype=np.float32)
    comm.Allreduce(rcoll.IN_PLACE, x, op=rcoll.SUM)

Everything here is the native module ``rcoll._rcoll`` (see ``_rcoll.pyi``) but ``alloc``;
``import rcoll.torch`` registers the torch.distributed backend ``"rcoll"``.
"""

from ._rcoll import (
    AVG,
    BAND,
    BOR,
    BXOR,
    IN_PLACE,
    MAX,
    MIN,
    Memory,
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
    init_rank,
    unique_id,
)
from ._rcoll import AsBfloat16 as as_bfloat16
from ._rcoll import init as _init

_world = None


def init():
    """Joins the job the environment describes (torchrun, mpirun, srun or ``RCOLL_*``) and
    returns its communicator; blocks, the GIL released, until every rank has joined."""
    global _world
    _world = _init()
    return _world


def alloc(shape, dtype="float32", comm=None):
    """A zeroed numpy array of ``shape`` and ``dtype`` in memory registered with ``comm``'s
    transport (default: the communicator ``init()`` returned): on verbs, collectives send
    from it without copying or registering again. ``dtype`` is anything ``numpy.dtype``
    takes, or ``"bfloat16"`` (an ml_dtypes array, which needs ml_dtypes installed). The
    memory lives as long as any array over it."""
    import numpy as np

    comm = comm if comm is not None else _world
    if comm is None:
        raise InvalidArgumentError("rcoll.alloc needs a communicator: call rcoll.init() first or pass comm=")
    if str(dtype) == "bfloat16":
        import ml_dtypes

        dtype = ml_dtypes.bfloat16
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    count = 1
    for n in shape:
        if n < 0:
            raise InvalidArgumentError(f"rcoll.alloc: negative dimension in shape {shape}")
        count *= n
    memory = comm._alloc(count * dtype.itemsize)
    return np.asarray(memory).view(dtype).reshape(shape)

__all__ = [
    "AVG",
    "BAND",
    "BOR",
    "BXOR",
    "IN_PLACE",
    "MAX",
    "MIN",
    "Memory",
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
    "alloc",
    "as_bfloat16",
    "init",
    "init_rank",
    "unique_id",
]
