"""Type stubs of rcoll's native module (re-exported whole by ``rcoll``).

Buffers are any object exporting the buffer protocol (numpy arrays, ``bytearray``,
``memoryview``, ``array.array``), C-contiguous, aligned, of one of rcoll's element types,
read from the buffer's format: int8 (``b``), uint8 (``B``), int32, uint32, int64, uint64,
float16 (``e``), float32 (``f``), float64 (``d``); bfloat16 from an ml_dtypes ``bfloat16``
array or any buffer of 2-byte items wrapped in ``as_bfloat16``. Lengths are in elements, as rcoll's
Rust API states them for each call. Insignificant buffers (a non-root's receive buffer of
``Reduce`` and ``Gather``, send buffer of ``Scatter``) may be ``None``.

Every blocking call releases the GIL while it waits. A buffer that is not contiguous,
read-only where rcoll writes, of another element type than its partner, of a type rcoll
lacks, misaligned, or sharing memory with its partner raises ``InvalidArgumentError``
before anything is sent, and the communicator stays usable. A wrong length, root or peer
found by rcoll itself raises ``InvalidArgumentError`` too, also before data moves, but
rcoll then aborts the group: the other ranks raise an ``Error`` naming this rank, and the
communicator is unusable, as after any other failure.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from typing_extensions import Buffer as _Buffer  # PEP 688 (Python 3.12: collections.abc.Buffer)

__version__: str

class Op:
    """A reduction operation."""

    @property
    def name(self) -> str:
        """rcoll's name: ``sum``, ``prod``, ``min``, ``max``, ``avg``, ``band``, ``bor``, ``bxor``."""

SUM: Op
"""Sum (integers wrap)."""
PROD: Op
"""Product (integers wrap)."""
MIN: Op
"""Minimum (a NaN loses to a number)."""
MAX: Op
"""Maximum (a NaN loses to a number)."""
AVG: Op
"""Sum divided by the number of ranks (integers: truncating division of the wrapped sum)."""
BAND: Op
"""Bitwise and (integer types only)."""
BOR: Op
"""Bitwise or (integer types only)."""
BXOR: Op
"""Bitwise exclusive or (integer types only)."""

class InPlace:
    """The type of ``IN_PLACE``."""

IN_PLACE: InPlace
"""Passed as the send buffer (as a root's receive buffer in ``Scatter``) for the in-place form."""

SendBuffer = Union[_Buffer, InPlace]

class Error(Exception):
    """Any rcoll failure. After one (but an ``InvalidArgumentError`` from the binding's own
    checks of buffers) the communicator is unusable: build a new one."""

class TimeoutError(Error):
    """Nothing moved for ``RCOLL_TIMEOUT`` seconds; the message names the peer waited for
    and the ranks that did not answer."""

class PeerError(Error):
    """A peer died, closed its end, aborted or sent something wrong. The message names it
    (and, for an abort, the chain of ranks back to the cause); ``peer`` is the rank this
    one heard it from."""

    peer: int

class InvalidArgumentError(Error):
    """A bad argument, named in the message."""

class MismatchError(Error):
    """Another rank called a different collective, or the same with other arguments."""

def init() -> Comm:
    """Joins the job the environment describes, as ``rcoll::process::init``: ``RCOLL_RANK``,
    ``RCOLL_WORLD_SIZE``, ``RCOLL_ROOT_ADDR`` and ``RCOLL_UNIQUE_ID`` (32 hex digits, the
    same on every rank), or torchrun's, mpirun's or srun's variables; ``RCOLL_TRANSPORT``,
    ``RCOLL_TIMEOUT`` and the rest as for any rcoll process. Blocks, the GIL released,
    until every rank has joined."""

def unique_id() -> bytes:
    """A fresh rendezvous for a new group (128 bytes: where this process now listens, and
    a random job secret), made on the process that will be the group's rank 0 and handed
    to every member by any means (torch's store, a file, MPI), as ``ncclGetUniqueId``."""

def init_rank(
    unique_id: bytes, rank: int, size: int, timeout: Optional[float] = None
) -> Comm:
    """Joins as rank ``rank`` of ``size`` the group ``unique_id`` names; ``timeout``
    (seconds) bounds every wait without progress (default ``RCOLL_TIMEOUT``'s). Transport
    and interface from ``RCOLL_TRANSPORT`` and ``RCOLL_SOCKET_IFNAME``."""

class as_bfloat16:
    """``as_bfloat16(buf)``: ``buf``'s 2-byte items taken as bfloat16 (a buffer cannot say
    it holds bfloat16: numpy has no such type). Passed wherever a buffer goes."""

    def __init__(self, buf: _Buffer) -> None: ...

class Memory:
    """Memory registered with a communicator's transport (see ``alloc``), which numpy
    arrays view through ``__array_interface__``; freed when no array uses it."""

    @property
    def registered(self) -> bool:
        """Whether the transport's device knows it (verbs: sends from it are zero-copy)."""
    @property
    def nbytes(self) -> int: ...
    @property
    def __array_interface__(self) -> Dict[str, Any]: ...

def alloc(shape: Union[int, Sequence[int]], dtype: Any = "float32", comm: Optional[Comm] = None) -> Any:
    """A zeroed numpy array of ``shape`` and ``dtype`` in memory registered with ``comm``'s
    transport (default: the communicator ``init()`` returned), as ``MPI_Alloc_mem``: on
    verbs, collectives on it send without copying or registering again. ``"bfloat16"``
    gives an ml_dtypes array (ml_dtypes must be installed)."""

class Request:
    """A nonblocking call in flight. It holds its buffers until the call is over: do not
    touch them before ``Wait`` or a true ``Test``. A request dropped in flight waits for
    its call first."""

    def Wait(self) -> None:
        """Blocks (the GIL released) until the call is over; raises its error if it failed.
        Returns at once after the first time."""
    def Test(self) -> bool:
        """Whether the call is over, without blocking; raises its error if it failed."""
    @staticmethod
    def Waitall(requests: List[Request]) -> None:
        """Waits for every request, then raises the first error among them."""

class Comm:
    """One rank's communicator. Calls run one at a time, in issue order (nonblocking ones
    on a progress thread, blocking ones after them on the caller's); any thread may call."""

    @property
    def rank(self) -> int:
        """This rank, ``0 .. size``."""
    @property
    def size(self) -> int:
        """The number of ranks."""
    def Get_rank(self) -> int: ...
    def Get_size(self) -> int: ...
    def Allreduce(self, sendbuf: SendBuffer, recvbuf: _Buffer, op: Op = ...) -> None:
        """Every rank's ``recvbuf`` becomes the element-wise reduction of all ranks'
        ``sendbuf`` (the same length). ``op`` defaults to ``SUM``."""
    def Bcast(self, buf: _Buffer, root: int = 0) -> None:
        """The root's ``buf`` is copied into every other rank's (the same length)."""
    def Reduce(
        self,
        sendbuf: SendBuffer,
        recvbuf: Optional[_Buffer] = None,
        op: Op = ...,
        root: int = 0,
    ) -> None:
        """The root's ``recvbuf`` becomes the reduction of all ranks' ``sendbuf``; other
        ranks' ``recvbuf`` is ignored. ``IN_PLACE`` as the root's ``sendbuf``: its
        ``recvbuf`` is its input."""
    def Allgather(self, sendbuf: SendBuffer, recvbuf: _Buffer) -> None:
        """Every rank's ``recvbuf`` (``size`` times ``sendbuf``'s length) becomes all ranks'
        ``sendbuf`` in rank order. In place: rank r's block of ``recvbuf`` is its input."""
    def Reduce_scatter_block(self, sendbuf: SendBuffer, recvbuf: _Buffer, op: Op = ...) -> None:
        """Rank r's ``recvbuf`` becomes block r of the reduction of all ranks' ``sendbuf``
        (``size`` blocks of ``recvbuf``'s length). In place, as MPI: ``recvbuf`` holds the
        ``size`` blocks of input, and the result lands at its start."""
    def Alltoall(self, sendbuf: SendBuffer, recvbuf: _Buffer) -> None:
        """Block j of rank i's ``sendbuf`` becomes block i of rank j's ``recvbuf`` (both
        ``size`` blocks)."""
    def Gather(
        self, sendbuf: SendBuffer, recvbuf: Optional[_Buffer] = None, root: int = 0
    ) -> None:
        """The root's ``recvbuf`` (``size`` blocks) becomes all ranks' ``sendbuf`` in rank
        order. ``IN_PLACE`` as the root's ``sendbuf``: its own block is already in place."""
    def Scatter(
        self, sendbuf: Optional[_Buffer], recvbuf: Union[_Buffer, InPlace], root: int = 0
    ) -> None:
        """Rank r's ``recvbuf`` becomes block r of the root's ``sendbuf`` (``size`` blocks).
        ``IN_PLACE`` as the root's ``recvbuf``: its block stays in its ``sendbuf``, which
        must then be writable."""
    def Barrier(self) -> None:
        """Returns once every rank has entered it."""
    def Send(self, buf: _Buffer, dest: int) -> None:
        """Sends ``buf`` to rank ``dest``, which receives it with a ``Recv`` of the same
        length. Messages between two ranks are matched in call order; there are no tags."""
    def Recv(self, buf: _Buffer, source: int) -> None:
        """Receives into ``buf`` from rank ``source``."""
    def Iallreduce(self, sendbuf: SendBuffer, recvbuf: _Buffer, op: Op = ...) -> Request:
        """Nonblocking ``Allreduce``."""
    def Ibcast(self, buf: _Buffer, root: int = 0) -> Request:
        """Nonblocking ``Bcast``."""
    def Iallgather(self, sendbuf: SendBuffer, recvbuf: _Buffer) -> Request:
        """Nonblocking ``Allgather``."""
    def Ireduce_scatter(self, sendbuf: SendBuffer, recvbuf: _Buffer, op: Op = ...) -> Request:
        """Nonblocking ``Reduce_scatter_block``."""
    def Ireduce_scatter_block(
        self, sendbuf: SendBuffer, recvbuf: _Buffer, op: Op = ...
    ) -> Request:
        """The same as ``Ireduce_scatter``."""
    def Ibarrier(self) -> Request:
        """Nonblocking ``Barrier``."""
    def Alltoallv(
        self, sendbuf: _Buffer, sendcounts: Sequence[int], recvbuf: _Buffer, recvcounts: Sequence[int]
    ) -> None:
        """``sendcounts[j]`` elements of ``sendbuf`` (blocks packed in rank order) go to rank
        j; ``recvcounts[i]`` elements from rank i land in ``recvbuf`` at their packed offset.
        Counts are in elements, one per rank, and must agree pairwise (MPI's rule)."""
    def Ireduce(
        self, sendbuf: SendBuffer, recvbuf: Optional[_Buffer] = None, op: Op = ..., root: int = 0
    ) -> Request:
        """Nonblocking ``Reduce``."""
    def Igather(
        self, sendbuf: SendBuffer, recvbuf: Optional[_Buffer] = None, root: int = 0
    ) -> Request:
        """Nonblocking ``Gather``."""
    def Iscatter(
        self, sendbuf: Optional[_Buffer], recvbuf: Union[_Buffer, InPlace], root: int = 0
    ) -> Request:
        """Nonblocking ``Scatter``."""
    def Ialltoall(self, sendbuf: SendBuffer, recvbuf: _Buffer) -> Request:
        """Nonblocking ``Alltoall``."""
    def Ialltoallv(
        self, sendbuf: _Buffer, sendcounts: Sequence[int], recvbuf: _Buffer, recvcounts: Sequence[int]
    ) -> Request:
        """Nonblocking ``Alltoallv``."""
    def Isend(self, buf: _Buffer, dest: int) -> Request:
        """Nonblocking ``Send``, run in issue order after this communicator's earlier calls."""
    def Irecv(self, buf: _Buffer, source: int) -> Request:
        """Nonblocking ``Recv``."""
    def Iexchange(
        self,
        sendbuf: _Buffer,
        sends: List[Tuple[int, int, int]],
        recvbuf: _Buffer,
        recvs: List[Tuple[int, int, int]],
    ) -> Request:
        """Nonblocking group of sends and receives, all in flight at once (torch's
        ``batch_isend_irecv``): each ``(peer, offset, count)`` of ``sends`` sends ``count``
        elements of ``sendbuf`` from ``offset`` to ``peer``; each of ``recvs`` receives
        ``count`` from ``peer`` into ``recvbuf`` at ``offset`` (ranges that do not overlap).
        The lists' order never deadlocks; messages between a pair match in order."""
    def Abort(self, reason: str = ...) -> None:
        """Ends the group: every rank's calls on it, running or later, fail at once with an
        error naming this rank and ``reason``."""
    def _alloc(self, nbytes: int) -> Memory:
        """``nbytes`` of registered memory (``alloc`` makes an array of it)."""
    def Split(self, color: Optional[int] = None, key: int = 0) -> Optional[Comm]:
        """A new communicator of the ranks passing the same ``color``, ranked by ``key``
        then by rank here, as ``MPI_Comm_split``; ``None`` or a negative color joins none
        and returns ``None``. Every rank must call it. This communicator stays usable."""
    def shrink(self, exclude: Sequence[int] = ..., abort: bool = False) -> Comm:
        """The survivors' communicator after a failure (or without the healthy ranks in
        ``exclude``), as ``MPIX_Comm_shrink`` / ``ncclCommShrink``: every surviving rank
        calls it, they agree on the failed ranks (the same on every one), keep their order
        and reuse the connections, with no rendezvous. ``abort=True`` first ends whatever
        is queued here. A rank the others left out gets an ``rcoll.Error``. This
        communicator is unusable afterwards."""
    @property
    def excluded(self) -> list[int]:
        """The ranks of the parent the shrink that made this communicator left out."""
