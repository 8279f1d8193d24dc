"""The ``"rcoll"`` backend: a ``c10d::Backend`` subclass whose every call is one or more
nonblocking rcoll calls on numpy views of the tensors' memory.

- Issue: each method checks its tensors, makes the views (no copy for contiguous tensors)
  and queues rcoll calls (``Comm.Iallreduce``, ...) on the group's communicator, whose
  progress thread runs them in issue order; it returns a `Work` at once.
- Completion: one thread per group (`_Completer`) waits for the calls whose future was
  asked for (``get_future()``, as DDP does for each bucket), in that order, and completes
  the future with the output tensors, so DDP's buckets overlap the backward pass and
  callbacks chained on the future run when the data is there.
- ``Work.wait()`` settles the call on the caller's thread (no thread switch for a
  synchronous collective); ``Work.wait(timeout)`` waits at most that long, then aborts
  the group (every rank's calls fail naming this one) and raises.
- Errors: rcoll's exceptions (``rcoll.PeerError`` naming the dead or stopped rank,
  ``rcoll.TimeoutError``, ...) reach ``wait()`` and the future.

Data movements (broadcast, gathers, scatters, all-to-all, send/recv) move bytes, so every
dtype works; reductions need a type rcoll reduces: float16, bfloat16, float32, float64,
int8, uint8, int32, int64, uint32, uint64 (bool as uint8, complex as pairs of reals for
SUM and AVG).
"""

import datetime
import os
import queue
import sys
import threading

import numpy as np
import torch

import rcoll

from . import _private

_OPS = {
    _private.RedOpType.SUM: rcoll.SUM,
    _private.RedOpType.PRODUCT: rcoll.PROD,
    _private.RedOpType.MIN: rcoll.MIN,
    _private.RedOpType.MAX: rcoll.MAX,
    _private.RedOpType.AVG: rcoll.AVG,
    _private.RedOpType.BAND: rcoll.BAND,
    _private.RedOpType.BOR: rcoll.BOR,
    _private.RedOpType.BXOR: rcoll.BXOR,
}

# On 0 and 1, sum (saturated), product, and the bitwise ops are max, min and themselves.
_BOOL_OPS = {
    _private.RedOpType.SUM: rcoll.MAX,
    _private.RedOpType.PRODUCT: rcoll.MIN,
    _private.RedOpType.MIN: rcoll.MIN,
    _private.RedOpType.MAX: rcoll.MAX,
    _private.RedOpType.BAND: rcoll.BAND,
    _private.RedOpType.BOR: rcoll.BOR,
    _private.RedOpType.BXOR: rcoll.BXOR,
}

_REDUCIBLE = {
    torch.float16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.uint32,
    torch.uint64,
}

_UNIQUE_ID_KEY = "rcoll/unique_id"

# Every live backend, until torch shuts it down. torch keeps only the C++ side of a
# backend its creator returned (ProcessGroup::setBackend); once Python collects the
# Python object, the trampoline finds no Python methods and calls c10d::Backend's, which
# fail ('getBackendName is not implemented', seen on groups from dist.new_group).
_LIVE = set()


class RcollError(RuntimeError):
    """A call the backend refuses before any communication (its message says why)."""


def create(opts, backend_options=None):
    """The creator ``dist.Backend.register_backend`` calls for each group this rank belongs
    to: rank 0 of the group makes a rendezvous (``rcoll.unique_id()``) and hands it to the
    others through the group's store."""
    rank, size = opts.group_rank, opts.group_size
    uid = _exchange_unique_id(opts.store, rank, size, lambda: bytes(rcoll.unique_id()))
    comm = _built_aside(lambda: rcoll.init_rank(bytes(uid), rank, size, timeout=_timeout(opts.timeout)))
    return _kept(RcollBackend(comm, opts.timeout))


def _exchange_unique_id(store, rank, size, make):
    """The id this group's ranks meet at: ``make()``'s on rank 0, handed to the others
    through the group's store.

    A store may outlive its group: torchrun's agent store stays across
    ``destroy_process_group`` and a new ``init_process_group``, which names the default
    group alike each time, so an earlier group's id may still be there when a rank asks.
    Each rank counts the groups it formed on this store (``store.add`` on a key of its
    own), and every member of a group forms it once, so the k-th group of rank 0 is the
    k-th of every rank: the id lives under that number, and a rank that asks first waits
    for it. A member that skipped a formation (it failed before its ``create``) leaves the
    numbering out of step for this store: the others then wait out the store's timeout
    here, with an error saying so, or fail to meet at an earlier group's id."""
    k = store.add(f"{_UNIQUE_ID_KEY}/formed/{size}/{rank}", 1)
    key = f"{_UNIQUE_ID_KEY}/{size}/{k}"
    if rank == 0:
        uid = make()
        store.set(key, uid)
        return uid
    try:
        return store.get(key)
    except Exception as e:  # noqa: BLE001 - torch's store errors have no common base
        raise RcollError(
            f"rank {rank} of {size}: rank 0 made no unique id for this group (formation {k} "
            f"of a group of {size} on this store) within the store's timeout; every member "
            f"must form every group, or the formations' numbering goes out of step ({e})"
        ) from e


def _built_aside(build):
    """``build()`` run on a thread of its own. rcoll binds the thread that builds a
    communicator, and the threads it starts (the progress thread, which runs this
    backend's calls that no waiting caller runs first), to the rank's core (``RCOLL_BIND``, default ``auto``): built on torch's
    main thread, that thread and torch's intra-op pool started after it would share that one
    core. Built aside, the progress thread is placed and the caller's threads keep their
    CPUs."""
    out = {}

    def run():
        try:
            out["comm"] = build()
        except BaseException as e:  # noqa: BLE001 - raised on the caller's thread below
            out["error"] = e

    t = threading.Thread(target=run, name="rcoll-torch-init")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["comm"]


def _kept(backend):
    _LIVE.add(backend)
    return backend


def _timeout(torch_timeout):
    """rcoll's no-progress timeout: ``RCOLL_TIMEOUT`` if set, else the group's."""
    env = os.environ.get("RCOLL_TIMEOUT")
    if env:
        return float(env)
    if isinstance(torch_timeout, datetime.timedelta) and torch_timeout.total_seconds() > 0:
        return torch_timeout.total_seconds()
    return None


def _seconds(timeout):
    """A ``wait`` timeout in seconds, or None for none (torch's kNoTimeout is 0 ms)."""
    if timeout is None:
        return None
    s = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    return s if s > 0 else None


class Work(_private.Work):
    """One backend call: its rcoll requests, the outputs its future carries, and what runs
    once the requests are over (copies back to non-contiguous outputs, unpacking).

    The future and the event a second waiter sleeps on are made only when asked for: a
    synchronous collective, issued and waited for at once on one thread, needs neither."""

    def __init__(self, backend, what, requests, outputs, after=None):
        super().__init__()
        self._backend = backend
        self._what = what
        self._requests = requests
        self._outputs = outputs
        self._after = after
        self._lock = threading.Lock()
        # A thread took the settling on itself (under _lock; it waits outside the lock, so
        # that another thread's wait keeps its timeout and get_future does not block).
        self._claimed = False
        self._queued = False
        # Set under _lock once the outcome is known and the future (if any) is about to
        # be completed; from then on, a future asked for is completed by the asker.
        self._known = False
        self._future = None
        self._settled = None  # a threading.Event, made by the first thread that must wait
        self._done = False  # the future completed: waiters may return
        # The thread completing the future: a callback chained on it that waits on this
        # Work runs there, and finds the outcome known rather than waiting for itself.
        self._completing = None
        self._error = None

    def _settle(self):
        """Waits for the requests (once, whichever thread comes first), completes the future,
        then marks the Work settled: a waiter returning sees the future complete."""
        with self._lock:
            first = not self._claimed
            self._claimed = True
            requests, self._requests = self._requests, []
        if not first:
            self._wait_done(None)
            return
        error = None
        try:
            for r in requests:
                r.Wait()
            if self._after is not None:
                self._after()
        except BaseException as e:  # noqa: BLE001 - handed to the waiter and the future
            error = e
        with self._lock:
            self._error = error
            self._known = True
            self._completing = threading.get_ident()
            future = self._future
        try:
            # Outside the lock: callbacks chained on the future run here and may wait on it.
            if future is not None:
                self._complete(future)
        finally:
            with self._lock:
                self._done = True
                self._completing = None
                settled = self._settled
            if settled is not None:
                settled.set()

    def _complete(self, future):
        # A future the caller completed itself keeps what they gave it; the Work's own
        # outcome is still what wait() reports.
        if future.done():
            return
        error = self._error
        if error is None:
            future.set_result(self._outputs)
        elif isinstance(error, Exception):
            future.set_exception(error)
        else:
            # A future carries only an Exception (a KeyboardInterrupt in the wait, say):
            # one naming it, so that whoever waits on the future is not left hanging.
            future.set_exception(RuntimeError(f"rcoll backend: {self._what}: {error!r}"))

    def _wait_done(self, seconds):
        """Waits until the Work is settled (at most `seconds`, None for no limit); whether it is."""
        with self._lock:
            if self._done or self._completing == threading.get_ident():
                return True
            if self._settled is None:
                self._settled = threading.Event()
            settled = self._settled
        return settled.wait(seconds)

    def wait(self, timeout=None):
        seconds = _seconds(timeout)
        if seconds is None:
            self._settle()
            return self._raise_or_true()
        self._to_completer()
        if not self._wait_done(seconds):
            reason = (
                f"rcoll backend: {self._what} on rank {self._backend._comm.rank} did not finish "
                f"within Work.wait's timeout of {seconds:g} s; the group is aborted"
            )
            self._backend._comm.Abort(reason)
            raise rcoll.TimeoutError(reason)
        return self._raise_or_true()

    def _raise_or_true(self):
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        return self._done

    def is_success(self):
        return self._done and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._outputs

    def get_future(self):
        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                complete = self._known
            else:
                complete = False
            future = self._future
        if complete:
            # Settled before anyone asked for the future: it completes here.
            self._complete(future)
        else:
            self._to_completer()
        return future

    def _to_completer(self):
        """Has the completion thread settle this Work. Only a Work whose future someone
        holds (DDP chains its buckets' callbacks on it) or that is waited for with a
        timeout needs it: a synchronous call settles on its own thread, without a hand-off."""
        with self._lock:
            queue = not self._queued and not self._claimed
            self._queued = True
        if queue:
            self._backend._completer.add(self)


class _Completer:
    """Settles a group's Works in issue order (the order rcoll runs them), so their futures
    complete without anyone waiting."""

    def __init__(self, rank):
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._run, name=f"rcoll-torch-completer-{rank}", daemon=True
        )
        self._thread.start()

    def add(self, work):
        self._queue.put(work)

    def _run(self):
        while True:
            work = self._queue.get()
            if work is None:
                return
            try:
                work._settle()
            except BaseException as e:  # noqa: BLE001 - the thread settles every later Work too
                print(f"rcoll backend: completing a Work failed: {e!r}", file=sys.stderr, flush=True)

    def stop(self):
        self._queue.put(None)
        self._thread.join()


class RcollBackend(_private.Backend):
    """One process group's rcoll communicator, as torch's ``Backend``."""

    def __init__(self, comm, timeout=None):
        super().__init__(comm.rank, comm.size)
        self._comm = comm
        self._timeout = timeout if timeout is not None else datetime.timedelta(minutes=30)
        self._completer = _Completer(comm.rank)
        self._closed = False
        self._sequence = 0
        # Between start_coalescing and end_coalescing: the group's calls (_Coalescing).
        self._coalescing = None

    # -- plumbing ---------------------------------------------------------------------

    def getBackendName(self):  # noqa: N802 - the trampoline's name
        return "rcoll"

    @property
    def options(self):
        return _private.BackendOptions("rcoll", self._timeout)

    def _get_sequence_number_for_group(self):
        return self._sequence

    def _set_sequence_number_for_group(self):
        pass  # deprecated in torch: numbers start at 0 on every rank

    # torch 2.15's trampoline reads these properties through Python; one a subclass does
    # not define resolves to c10d's, which asks the trampoline again, endlessly (see
    # _private.BackendOptions). So each is stated, even where the answer is c10d's.
    @property
    def supports_coalescing(self):
        # torch's batch_isend_irecv then brackets its sends and receives with
        # start_coalescing/end_coalescing, and they run as one rcoll Iexchange, all in
        # flight at once: issued one by one, in issue order, a receive listed before the
        # matching send on both ranks would wait for ever.
        return True

    def start_coalescing(self):
        if self._coalescing is not None:
            raise RcollError("rcoll backend: start_coalescing inside a coalescing group")
        self._coalescing = _Coalescing()

    def end_coalescing(self):
        """Issues the group's sends and receives as one Iexchange (packed: one copy of the
        sends, one of the receives into their tensors) and returns one Work for the group:
        its exchange and the collectives called inside the group."""
        group, self._coalescing = self._coalescing, None
        if group is None:
            raise RcollError("rcoll backend: end_coalescing without start_coalescing")
        requests = [_Settles(w) for w in group.works]
        after = _After()
        if group.p2p:
            sends, recvs, parts, into = [], [], [], []
            sent = received = 0
            for kind, t, peer in group.p2p:
                if kind == "send":
                    raw = _raw_tensor(after.input(t))
                    parts.append(raw)
                    sends.append((peer, sent, raw.numel()))
                    sent += raw.numel()
                else:
                    _check_cpu(t)
                    recvs.append((peer, received, _nbytes(t)))
                    into.append(t)
                    received += _nbytes(t)
            # rcoll takes no empty buffer: a byte stands in for a side with nothing.
            send = torch.cat(parts) if sent else torch.zeros(1, dtype=torch.uint8)
            recv = torch.empty(max(received, 1), dtype=torch.uint8)
            after.input(send)
            after.unpack_bytes(recv, into)
            requests.insert(0, self._comm.Iexchange(send.numpy(), sends, recv.numpy(), recvs))
        work = self._work(f"{len(group.p2p)} coalesced sends and receives", requests, [], after)
        for joined in group.joined:
            joined.work = work
        return work

    @property
    def supports_shrinking(self):
        return False

    @property
    def supports_reconfigure(self):
        return False

    @property
    def supports_window(self):
        return False

    @property
    def _supports_time_estimate(self):
        return False

    def _work(self, what, requests, outputs, after=None):
        self._sequence += 1
        work = Work(self, what, requests, outputs, after)
        if self._coalescing is not None:
            self._coalescing.works.append(work)
        return work

    def _reduce_op(self, opts, tensor, what):
        kind = opts.reduceOp.op
        table = _BOOL_OPS if tensor.dtype == torch.bool else _OPS
        if kind not in table:
            raise RcollError(
                f"rcoll backend: {what} with ReduceOp {kind.name} on {tensor.dtype} is not "
                "supported (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR are; AVG not on bool)"
            )
        if tensor.dtype.is_complex and kind not in (
            _private.RedOpType.SUM,
            _private.RedOpType.AVG,
        ):
            raise RcollError(
                f"rcoll backend: {what} of complex tensors supports SUM and AVG, not {kind.name}"
            )
        return table[kind]

    def _root(self, root, what):
        if not 0 <= root < self._comm.size:
            raise RcollError(
                f"rcoll backend: {what} root {root} is not a rank of this {self._comm.size}-rank group"
            )
        return root

    # -- collectives ------------------------------------------------------------------

    def allreduce(self, tensors, opts):
        reqs, after = [], _After()
        for t in tensors:
            op = self._reduce_op(opts, t, "allreduce")
            buf = after.inout(t)
            reqs.append(self._comm.Iallreduce(rcoll.IN_PLACE, _typed(buf, "allreduce"), op))
        return self._work("allreduce", reqs, tensors, after)

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def allreduce_sparse(self, tensors, opts):
        raise RcollError("rcoll backend: sparse tensors are not supported")

    def broadcast(self, tensors, opts):
        root = self._root(opts.rootRank, "broadcast")
        reqs, after = [], _After()
        for t in tensors:
            reqs.append(self._comm.Ibcast(_raw(after.inout(t)), root))
        return self._work("broadcast", reqs, tensors, after)

    def reduce(self, tensors, opts):
        root = self._root(opts.rootRank, "reduce")
        reqs, after = [], _After()
        for t in tensors:
            op = self._reduce_op(opts, t, "reduce")
            buf = _typed(after.inout(t), "reduce")
            if self._comm.rank == root:
                reqs.append(self._comm.Ireduce(rcoll.IN_PLACE, buf, op, root))
            else:
                reqs.append(self._comm.Ireduce(buf, None, op, root))
        return self._work("reduce", reqs, tensors, after)

    def allgather(self, output_lists, inputs, opts):
        reqs, after = [], _After()
        for outs, t in zip(output_lists, inputs):
            self._check_list(outs, t, "allgather")
            flat = torch.empty((self._comm.size, t.numel()), dtype=t.dtype)
            reqs.append(self._comm.Iallgather(_raw(after.input(t)), _raw(flat)))
            after.scatter_rows(flat, outs)
        return self._work("allgather", reqs, output_lists, after)

    def allgather_coalesced(self, output_lists, inputs, opts):
        """``output_lists[q][i]`` receives rank q's ``inputs[i]``."""
        if len(output_lists) != self._comm.size:
            raise RcollError(
                f"rcoll backend: allgather_coalesced takes {self._comm.size} output lists "
                f"(one per rank), got {len(output_lists)}"
            )
        reqs, after = [], _After()
        for i, t in enumerate(inputs):
            row = [outs[i] for outs in output_lists]
            self._check_list(row, t, "allgather_coalesced")
            flat = torch.empty((self._comm.size, t.numel()), dtype=t.dtype)
            reqs.append(self._comm.Iallgather(_raw(after.input(t)), _raw(flat)))
            after.scatter_rows(flat, row)
        return self._work("allgather_coalesced", reqs, output_lists, after)

    def all_gather_single(self, output, input, opts):
        self._check_single(output, input, self._comm.size, "all_gather_into_tensor")
        after = _After()
        req = self._comm.Iallgather(_raw(after.input(input)), _raw(after.output(output)))
        return self._work("all_gather_into_tensor", [req], [output], after)

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        reqs, after = [], _After()
        for o, t in zip(outputs, inputs):
            self._check_single(o, t, self._comm.size, "all_gather_into_tensor_coalesced")
            reqs.append(self._comm.Iallgather(_raw(after.input(t)), _raw(after.output(o))))
        return self._work("all_gather_into_tensor_coalesced", reqs, outputs, after)

    def gather(self, output_lists, inputs, opts):
        root = self._root(opts.rootRank, "gather")
        reqs, after = [], _After()
        for i, t in enumerate(inputs):
            if self._comm.rank == root:
                outs = output_lists[i]
                self._check_list(outs, t, "gather")
                flat = torch.empty((self._comm.size, t.numel()), dtype=t.dtype)
                reqs.append(self._comm.Igather(_raw(after.input(t)), _raw(flat), root))
                after.scatter_rows(flat, outs)
            else:
                reqs.append(self._comm.Igather(_raw(after.input(t)), None, root))
        return self._work("gather", reqs, output_lists, after)

    def scatter(self, outputs, input_lists, opts):
        root = self._root(opts.rootRank, "scatter")
        reqs, after = [], _After()
        for i, o in enumerate(outputs):
            if self._comm.rank == root:
                ins = input_lists[i]
                self._check_list(ins, o, "scatter")
                flat = torch.stack([x.reshape(-1) for x in ins]) if ins else None
                reqs.append(self._comm.Iscatter(_raw(flat), _raw(after.output(o)), root))
            else:
                reqs.append(self._comm.Iscatter(None, _raw(after.output(o)), root))
        return self._work("scatter", reqs, outputs, after)

    def reduce_scatter(self, outputs, input_lists, opts):
        reqs, after = [], _After()
        for o, ins in zip(outputs, input_lists):
            self._check_list(ins, o, "reduce_scatter")
            op = self._reduce_op(opts, o, "reduce_scatter")
            flat = torch.stack([x.reshape(-1) for x in ins])
            out = _typed(after.output(o), "reduce_scatter")
            reqs.append(self._comm.Ireduce_scatter(_typed(flat, "reduce_scatter"), out, op))
        return self._work("reduce_scatter", reqs, outputs, after)

    def reduce_scatter_single(self, output, input, opts):
        self._check_single(input, output, self._comm.size, "reduce_scatter_tensor")
        op = self._reduce_op(opts, output, "reduce_scatter_tensor")
        after = _After()
        req = self._comm.Ireduce_scatter(
            _typed(after.input(input), "reduce_scatter_tensor"),
            _typed(after.output(output), "reduce_scatter_tensor"),
            op,
        )
        return self._work("reduce_scatter_tensor", [req], [output], after)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        reqs, after = [], _After()
        for o, t in zip(outputs, inputs):
            self._check_single(t, o, self._comm.size, "reduce_scatter_tensor_coalesced")
            op = self._reduce_op(opts, o, "reduce_scatter_tensor_coalesced")
            reqs.append(
                self._comm.Ireduce_scatter(
                    _typed(after.input(t), "reduce_scatter"),
                    _typed(after.output(o), "reduce_scatter"),
                    op,
                )
            )
        return self._work("reduce_scatter_tensor_coalesced", reqs, outputs, after)

    def all_to_all_single(self, output, input, output_splits, input_splits, opts):
        after = _After()
        n = self._comm.size
        if output.dtype != input.dtype:
            raise RcollError(
                f"rcoll backend: all_to_all_single from {input.dtype} into {output.dtype}"
            )
        out, inp = _raw(after.output(output)), _raw(after.input(input))
        if not output_splits and not input_splits:
            if input.numel() % n or output.numel() != input.numel():
                raise RcollError(
                    f"rcoll backend: all_to_all_single of {input.numel()} elements into "
                    f"{output.numel()} on {n} ranks: equal blocks need the same multiple of {n}"
                )
            req = self._comm.Ialltoall(inp, out)
        else:
            send = _split_bytes(input, input_splits, n, "input_split_sizes")
            recv = _split_bytes(output, output_splits, n, "output_split_sizes")
            req = self._comm.Ialltoallv(inp, send, out, recv)
        return self._work("all_to_all_single", [req], [output], after)

    def alltoall(self, outputs, inputs, opts):
        n = self._comm.size
        if len(outputs) != n or len(inputs) != n:
            raise RcollError(
                f"rcoll backend: all_to_all takes {n} input and {n} output tensors, "
                f"got {len(inputs)} and {len(outputs)}"
            )
        after = _After()
        send = torch.cat([_raw_tensor(x) for x in inputs]) if n else torch.empty(0)
        recv = torch.empty(sum(_nbytes(o) for o in outputs), dtype=torch.uint8)
        req = self._comm.Ialltoallv(
            send.numpy(), [_nbytes(x) for x in inputs], recv.numpy(), [_nbytes(o) for o in outputs]
        )
        after.unpack_bytes(recv, outputs)
        return self._work("all_to_all", [req], outputs, after)

    def barrier(self, opts):
        return self._work("barrier", [self._comm.Ibarrier()], [])

    def send(self, tensors, dst, tag):
        if self._coalescing is not None:
            return self._coalesced("send", tensors, dst)
        after = _After()
        reqs = [self._comm.Isend(_raw(after.input(t)), dst) for t in tensors]
        return self._work(f"send to {dst}", reqs, tensors, after)

    def recv(self, tensors, src, tag):
        if self._coalescing is not None:
            return self._coalesced("recv", tensors, src)
        after = _After()
        reqs = [self._comm.Irecv(_raw(after.inout(t)), src) for t in tensors]
        return self._work(f"recv from {src}", reqs, tensors, after)

    def _coalesced(self, kind, tensors, peer):
        """A send or receive inside a coalescing group: recorded for end_coalescing; its
        Work completes with the group's."""
        if not 0 <= peer < self._comm.size or peer == self._comm.rank:
            raise RcollError(
                f"rcoll backend: {kind} peer {peer} is not another rank of this "
                f"{self._comm.size}-rank group"
            )
        joined = _Settles()
        self._coalescing.joined.append(joined)
        self._coalescing.p2p.extend((kind, t, peer) for t in tensors)
        return Work(self, f"{kind} with {peer} (coalesced)", [joined], tensors)

    def recv_anysource(self, tensors, tag):
        raise RcollError("rcoll backend: recv without a source rank is not supported")

    # -- groups -----------------------------------------------------------------------

    @property
    def supports_splitting(self):
        return True

    def split(self, store, ranks, opts):
        """``dist.split_group``: rcoll's ``Split`` of this group, which every member of it
        calls (the ranks of each new group pass the same color: their lowest rank)."""
        me = self._comm.rank
        color = min(ranks) if me in ranks else None
        key = sorted(ranks).index(me) if me in ranks else 0
        made = _built_aside(lambda: self._comm.Split(color, key))
        return _kept(RcollBackend(made, self._timeout)) if made is not None else None

    # -- end --------------------------------------------------------------------------

    def abort(self):
        self._comm.Abort("torch aborted the process group")

    def shutdown(self):
        if not self._closed:
            self._closed = True
            self._completer.stop()
        _LIVE.discard(self)

    # -- argument checks --------------------------------------------------------------

    def _check_list(self, tensors, like, what):
        n = self._comm.size
        if len(tensors) != n:
            raise RcollError(f"rcoll backend: {what} takes {n} tensors (one per rank), got {len(tensors)}")
        for i, t in enumerate(tensors):
            if t.numel() != like.numel() or t.dtype != like.dtype:
                raise RcollError(
                    f"rcoll backend: {what}: tensor {i} has {t.numel()} {t.dtype} elements, "
                    f"this rank's {like.numel()} {like.dtype}: rcoll moves equal blocks"
                )

    def _check_single(self, big, small, n, what):
        if big.dtype != small.dtype or big.numel() != small.numel() * n:
            raise RcollError(
                f"rcoll backend: {what}: {big.numel()} {big.dtype} elements against "
                f"{small.numel()} {small.dtype} on {n} ranks (the large side is {n} times the small)"
            )


class _Coalescing:
    """What a coalescing group gathered: its sends and receives, the Works of the
    collectives called inside it, and the placeholders of its sends' and receives' Works."""

    def __init__(self):
        self.p2p = []
        self.works = []
        self.joined = []


class _Settles:
    """A request standing for a whole Work (the group's, set at end_coalescing): waiting
    for it settles that Work and raises its error, so that every Work of a group sees the
    group's outcome."""

    def __init__(self, work=None):
        self.work = work

    def Wait(self):  # noqa: N802 - a request's name
        if self.work is None:
            raise RcollError(
                "rcoll backend: a call of a coalescing group was waited for before the group ended"
            )
        self.work._settle()
        if self.work._error is not None:
            raise self.work._error


class _After:
    """What a call does once its data moved: copies from contiguous staging tensors back
    into non-contiguous outputs, rows of a gathered tensor into the caller's list. It also
    keeps the staging tensors alive while rcoll uses their memory."""

    def __init__(self):
        self._steps = []
        self._keep = []

    def __call__(self):
        for step in self._steps:
            step()

    def input(self, t):
        _check_cpu(t)
        c = t.detach()
        if not c.is_contiguous():
            c = c.contiguous()
        self._keep.append(c)
        return c

    def output(self, t):
        _check_cpu(t)
        if t.is_contiguous():
            return t.detach()
        c = t.detach().contiguous()
        self._keep.append(c)
        self._steps.append(lambda: t.detach().copy_(c))
        return c

    def inout(self, t):
        return self.output(t)

    def scatter_rows(self, flat, outs):
        self._keep.append(flat)

        def copy():
            for i, o in enumerate(outs):
                o.detach().copy_(flat[i].view(o.shape))

        self._steps.append(copy)

    def unpack_bytes(self, recv, outs):
        self._keep.append(recv)

        def copy():
            at = 0
            for o in outs:
                nb = _nbytes(o)
                o.detach().copy_(recv[at : at + nb].view(o.dtype).view(o.shape))
                at += nb

        self._steps.append(copy)


def _check_cpu(t):
    if t.device.type != "cpu":
        raise RcollError(f"rcoll backend: tensors must be on the CPU, got one on {t.device}")
    if t.is_sparse:
        raise RcollError("rcoll backend: sparse tensors are not supported")


def _raw_tensor(t):
    """A contiguous tensor's bytes, as a flat uint8 tensor over the same memory."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.reshape(-1).view(torch.uint8)


def _raw(t):
    """A tensor's bytes as a numpy array (data movements ignore the type)."""
    if t is None:
        return None
    return _raw_tensor(t).numpy()


def _nbytes(t):
    return t.numel() * t.element_size()


def _typed(t, what):
    """A contiguous tensor as a buffer rcoll reduces, of its own element type."""
    t = t.detach()
    if t.dtype in _REDUCIBLE:
        return t.numpy()
    if t.dtype == torch.bfloat16:
        return rcoll.as_bfloat16(t.view(torch.int16).numpy())
    if t.dtype == torch.bool:
        return t.view(torch.uint8).numpy()
    if t.dtype.is_complex:
        return torch.view_as_real(t).numpy()
    raise RcollError(
        f"rcoll backend: {what} cannot reduce {t.dtype}: rcoll reduces float16, bfloat16, "
        "float32, float64, int8, uint8, int32, int64, uint32, uint64 (and bool, complex)"
    )


def _split_bytes(t, splits, n, what):
    """all_to_all_single's split sizes (rows of the first dimension) in bytes per rank."""
    if not splits:
        if t.shape[0] % n if t.dim() else True:
            raise RcollError(f"rcoll backend: all_to_all_single: {what} omitted and {t.shape} does not split in {n}")
        splits = [t.shape[0] // n] * n
    if len(splits) != n:
        raise RcollError(f"rcoll backend: all_to_all_single: {what} has {len(splits)} entries for {n} ranks")
    row = (t.numel() // t.shape[0] if t.shape[0] else 0) * t.element_size()
    return [int(s) * row for s in splits]


# numpy is needed by the views (torch's .numpy()); imported here so that a missing numpy
# fails at `import rcoll.torch`, not at the first collective.
_ = np
