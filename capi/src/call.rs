//! One collective call from C: its arguments checked before any communication (so a bad
//! argument leaves the communicator usable), then run on a [`Communicator`] with slices
//! made from the caller's pointers.

use rcoll::{Communicator, DataType, Element, ReduceOp};

/// Which call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Gather,
    Scatter,
    Send,
    Recv,
    Barrier,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "rcollAllReduce",
            Kind::Broadcast => "rcollBroadcast",
            Kind::Reduce => "rcollReduce",
            Kind::AllGather => "rcollAllGather",
            Kind::ReduceScatter => "rcollReduceScatter",
            Kind::AllToAll => "rcollAllToAll",
            Kind::Gather => "rcollGather",
            Kind::Scatter => "rcollScatter",
            Kind::Send => "rcollSend",
            Kind::Recv => "rcollRecv",
            Kind::Barrier => "rcollBarrier",
        }
    }
}

/// A checked call: addresses (not pointers, so that it can cross to the progress thread)
/// and lengths in elements.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    kind: Kind,
    /// Address and length of the send buffer as this rank uses it (length 0: unused).
    send: (usize, usize),
    /// Address and length of the receive buffer as this rank uses it (length 0: unused).
    recv: (usize, usize),
    /// The in-place form: one buffer, `recv`.
    in_place: bool,
    dtype: DataType,
    op: ReduceOp,
    /// Root or peer.
    root: usize,
}

/// The raw arguments of a call, as C passed them.
pub struct Raw {
    pub kind: Kind,
    pub send: *const std::ffi::c_void,
    pub recv: *const std::ffi::c_void,
    pub count: usize,
    pub dtype: i32,
    pub op: i32,
    pub root: i32,
    /// The `rcollI*` form.
    pub nonblocking: bool,
}

/// The C datatype code's type.
pub fn data_type(code: i32) -> Option<DataType> {
    Some(match code {
        0 => DataType::I8,
        1 => DataType::U8,
        2 => DataType::I32,
        3 => DataType::U32,
        4 => DataType::I64,
        5 => DataType::U64,
        6 => DataType::F16,
        7 => DataType::F32,
        8 => DataType::F64,
        9 => DataType::Bf16,
        _ => return None,
    })
}

fn reduce_op(code: i32) -> Option<ReduceOp> {
    Some(match code {
        0 => ReduceOp::Sum,
        1 => ReduceOp::Prod,
        2 => ReduceOp::Max,
        3 => ReduceOp::Min,
        4 => ReduceOp::Avg,
        _ => return None,
    })
}

impl Raw {
    /// A blocking call's arguments (`op` and `root` 0 where the call has none).
    pub fn new(
        kind: Kind,
        send: *const std::ffi::c_void,
        recv: *const std::ffi::c_void,
        count: usize,
        dtype: i32,
        op: i32,
        root: i32,
    ) -> Raw {
        Raw {
            kind,
            send,
            recv,
            count,
            dtype,
            op,
            root,
            nonblocking: false,
        }
    }

    /// Checks every argument for rank `rank` of `size`; the error names the rank, the call
    /// and the argument.
    pub fn check(&self, rank: usize, size: usize) -> Result<Call, String> {
        let fail = |what: String| {
            let (name, i) = (self.kind.name(), if self.nonblocking { "I" } else { "" });
            Err(format!(
                "rank {rank}: {}{i}{}: {what}",
                &name[..5],
                &name[5..]
            ))
        };
        let dtype = match self.kind {
            Kind::Barrier => DataType::U8,
            _ => match data_type(self.dtype) {
                Some(t) => t,
                None => return fail(format!("datatype {} is not an rcollDataType_t", self.dtype)),
            },
        };
        let reduces = matches!(
            self.kind,
            Kind::AllReduce | Kind::Reduce | Kind::ReduceScatter
        );
        let op = if reduces {
            match reduce_op(self.op) {
                Some(op) => op,
                None => return fail(format!("op {} is not an rcollRedOp_t", self.op)),
            }
        } else {
            ReduceOp::Sum
        };
        let rooted = matches!(
            self.kind,
            Kind::Broadcast | Kind::Reduce | Kind::Gather | Kind::Scatter
        );
        let p2p = matches!(self.kind, Kind::Send | Kind::Recv);
        let root = if rooted || p2p {
            let what = if p2p { "peer" } else { "root" };
            match usize::try_from(self.root) {
                Ok(r) if r < size && !(p2p && r == rank) => r,
                _ => {
                    return fail(format!(
                        "{what} {} is not {} of this {size}-rank communicator",
                        self.root,
                        if p2p { "another rank" } else { "a rank" }
                    ))
                }
            }
        } else {
            0
        };
        let es = dtype.size();
        let count = if self.kind == Kind::Barrier {
            0
        } else {
            self.count
        };
        // Every length in bytes must fit an isize (Rust's limit on one object).
        let all = match count.checked_mul(size) {
            Some(a) if a.checked_mul(es).is_some_and(|b| b <= isize::MAX as usize) => a,
            _ => {
                return fail(format!(
                    "count {count} of {} bytes times {size} ranks overflows",
                    es
                ))
            }
        };
        let me = rank == root;
        let (send_len, recv_len) = match self.kind {
            Kind::AllReduce => (count, count),
            Kind::Broadcast => (if me { count } else { 0 }, count),
            Kind::Reduce => (count, if me { count } else { 0 }),
            Kind::AllGather => (count, all),
            Kind::ReduceScatter => (all, count),
            Kind::AllToAll => (all, all),
            Kind::Gather => (count, if me { all } else { 0 }),
            Kind::Scatter => (if me { all } else { 0 }, count),
            Kind::Send => (count, 0),
            Kind::Recv => (0, count),
            Kind::Barrier => (0, 0),
        };
        let (s, r) = (self.send as usize, self.recv as usize);
        for (what, addr, len) in [("sendbuff", s, send_len), ("recvbuff", r, recv_len)] {
            if len == 0 {
                continue;
            }
            if addr == 0 {
                return fail(format!("{what} is NULL ({len} elements of {dtype})"));
            }
            if addr % es != 0 {
                return fail(format!(
                    "{what} {addr:#x} is not aligned to {es} bytes, the size of {dtype}"
                ));
            }
            if addr.checked_add(len * es).is_none() {
                return fail(format!("{what} {addr:#x} + {len} elements wraps around"));
            }
        }
        // The in-place forms (NCCL's), and no other overlap: a send buffer that shares
        // bytes with the receive buffer otherwise would be read while written.
        let in_place = send_len > 0
            && recv_len > 0
            && match self.kind {
                Kind::AllReduce | Kind::Broadcast | Kind::Reduce | Kind::AllToAll => s == r,
                Kind::AllGather => Some(s) == r.checked_add(rank * count * es),
                Kind::ReduceScatter => s.checked_add(rank * count * es) == Some(r),
                Kind::Gather => Some(s) == r.checked_add(root * count * es),
                Kind::Scatter => s.checked_add(root * count * es) == Some(r),
                _ => false,
            };
        if !in_place
            && send_len > 0
            && recv_len > 0
            && s < r + recv_len * es
            && r < s + send_len * es
        {
            return fail(
                "sendbuff and recvbuff overlap without being the in-place form".to_string(),
            );
        }
        // The in-place form runs on one buffer: the larger of the two.
        let (send, recv) = if in_place {
            match self.kind {
                Kind::ReduceScatter | Kind::Scatter => ((0, 0), (s, send_len)),
                _ => ((0, 0), (r, recv_len)),
            }
        } else {
            ((s, send_len), (r, recv_len))
        };
        Ok(Call {
            kind: self.kind,
            send,
            recv,
            in_place,
            dtype,
            op,
            root,
        })
    }
}

impl Call {
    /// Runs the call on `comm`.
    ///
    /// # Safety
    /// The buffers [`Raw::check`] accepted must be valid for their lengths (the send buffer
    /// for reads, the receive buffer for reads and writes) and not used by anyone else
    /// until this returns: the C API's contract.
    pub unsafe fn run(&self, comm: &mut Communicator) -> rcoll::Result<()> {
        type Typed = unsafe fn(&Call, &mut Communicator) -> rcoll::Result<()>;
        let typed: Typed = match self.dtype {
            DataType::I8 => Call::typed::<i8>,
            DataType::U8 => Call::typed::<u8>,
            DataType::I32 => Call::typed::<i32>,
            DataType::U32 => Call::typed::<u32>,
            DataType::I64 => Call::typed::<i64>,
            DataType::U64 => Call::typed::<u64>,
            DataType::F16 => Call::typed::<half::f16>,
            DataType::Bf16 => Call::typed::<half::bf16>,
            DataType::F32 => Call::typed::<f32>,
            DataType::F64 => Call::typed::<f64>,
            other => return Err(rcoll::Error::Config(format!("{other} has no C type"))),
        };
        // SAFETY: the caller's contract, passed on; `typed` matches the call's data type.
        unsafe { typed(self, comm) }
    }

    /// # Safety
    /// As [`Call::run`], and `T` is the call's data type.
    unsafe fn typed<T: Element>(&self, comm: &mut Communicator) -> rcoll::Result<()> {
        let send: &[T] = if self.send.1 == 0 {
            &[]
        } else {
            // SAFETY: non-null and aligned for T (checked), valid for reads of this many
            // elements and not written by anyone during the call (the caller's contract),
            // and disjoint from `recv` (checked: overlapping buffers are refused unless they
            // are the in-place form, which has no send slice).
            unsafe { std::slice::from_raw_parts(self.send.0 as *const T, self.send.1) }
        };
        let recv: &mut [T] = if self.recv.1 == 0 {
            &mut []
        } else {
            // SAFETY: as for `send`, valid for writes too and used by no one else until
            // the call ends (the caller's contract).
            unsafe { std::slice::from_raw_parts_mut(self.recv.0 as *mut T, self.recv.1) }
        };
        let (root, op) = (self.root, self.op);
        match (self.kind, self.in_place) {
            (Kind::AllReduce, true) => comm.all_reduce_in_place(recv, op),
            (Kind::AllReduce, false) => comm.all_reduce(send, recv, op),
            (Kind::Broadcast, true) => comm.broadcast_in_place(recv, root),
            // Not the root, or the root from a separate buffer.
            (Kind::Broadcast, false) if send.is_empty() => comm.broadcast_in_place(recv, root),
            (Kind::Broadcast, false) => comm.broadcast(send, recv, root),
            (Kind::Reduce, true) => comm.reduce_in_place(recv, op, root),
            (Kind::Reduce, false) => comm.reduce(send, recv, op, root),
            (Kind::AllGather, true) => comm.all_gather_in_place(recv),
            (Kind::AllGather, false) => comm.all_gather(send, recv),
            (Kind::ReduceScatter, true) => comm.reduce_scatter_in_place(recv, op),
            (Kind::ReduceScatter, false) => comm.reduce_scatter(send, recv, op),
            (Kind::AllToAll, true) => comm.all_to_all_in_place(recv),
            (Kind::AllToAll, false) => comm.all_to_all(send, recv),
            (Kind::Gather, true) => comm.gather_in_place(recv, root),
            (Kind::Gather, false) => comm.gather(send, recv, root),
            (Kind::Scatter, true) => comm.scatter_in_place(recv, root),
            (Kind::Scatter, false) => comm.scatter(send, recv, root),
            (Kind::Send, _) => comm.send(send, root),
            (Kind::Recv, _) => comm.recv(recv, root),
            (Kind::Barrier, _) => comm.barrier(),
        }
    }
}
