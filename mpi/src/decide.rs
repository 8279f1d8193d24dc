//! Served or forwarded, and why: the shim's policy, as pure functions of a call's arguments
//! (what C says of its datatypes and op, the communicator's rank and size), so that unit
//! tests reach every rule. One rule more needs the communicator's rcoll side: small
//! blocking calls inside one host go to MPI (`comms::Ready::too_small`, on [`Plan::bytes`]
//! and what the members agreed on when the communicator formed). It is applied after
//! these, except on the world's communicator, where a call whose bytes are its one count
//! and datatype is measured first (`entry::small_on_world`).
//!
//! Every rank of a communicator must take the same decision for the same call, or one
//! rank runs rcoll while another runs MPI and both wait forever. So a rule may look only
//! at what MPI requires to agree across ranks: a reduction's datatype, count and op (the
//! same everywhere), a data movement's bytes per block (equal type signatures mean equal
//! sizes), the root, the counts array of `MPI_Reduce_scatter`. Data movements therefore run
//! as bytes, whatever the (contiguous) datatype on each rank, and buffers rcoll cannot take
//! as they are (misaligned, overlapping) are copied rather than forwarded: alignment is a
//! local fact.

use std::fmt;

use rcoll::{DataType, ReduceOp};

use crate::ffi::type_code;

/// The MPI collectives the shim defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coll {
    /// `MPI_Allreduce`
    Allreduce,
    /// `MPI_Reduce`
    Reduce,
    /// `MPI_Bcast`
    Bcast,
    /// `MPI_Allgather`
    Allgather,
    /// `MPI_Reduce_scatter_block`
    ReduceScatterBlock,
    /// `MPI_Reduce_scatter`
    ReduceScatter,
    /// `MPI_Alltoall`
    Alltoall,
    /// `MPI_Gather`
    Gather,
    /// `MPI_Scatter`
    Scatter,
    /// `MPI_Barrier`
    Barrier,
    /// `MPI_Iallreduce`
    Iallreduce,
    /// `MPI_Ibcast`
    Ibcast,
    /// `MPI_Iallgather`
    Iallgather,
    /// `MPI_Ireduce_scatter_block`
    IreduceScatterBlock,
    /// `MPI_Ibarrier`
    Ibarrier,
    /// `MPI_Allgatherv` (forwarded: counted only)
    Allgatherv,
    /// `MPI_Gatherv` (forwarded)
    Gatherv,
    /// `MPI_Scatterv` (forwarded)
    Scatterv,
    /// `MPI_Alltoallv` (forwarded)
    Alltoallv,
    /// `MPI_Scan` (forwarded)
    Scan,
    /// `MPI_Exscan` (forwarded)
    Exscan,
}

impl Coll {
    /// Every one, in the order of the stats lines.
    pub const ALL: [Coll; 21] = [
        Coll::Allreduce,
        Coll::Reduce,
        Coll::Bcast,
        Coll::Allgather,
        Coll::ReduceScatterBlock,
        Coll::ReduceScatter,
        Coll::Alltoall,
        Coll::Gather,
        Coll::Scatter,
        Coll::Barrier,
        Coll::Iallreduce,
        Coll::Ibcast,
        Coll::Iallgather,
        Coll::IreduceScatterBlock,
        Coll::Ibarrier,
        Coll::Allgatherv,
        Coll::Gatherv,
        Coll::Scatterv,
        Coll::Alltoallv,
        Coll::Scan,
        Coll::Exscan,
    ];

    /// Its MPI name.
    pub fn mpi_name(self) -> &'static str {
        match self {
            Coll::Allreduce => "MPI_Allreduce",
            Coll::Reduce => "MPI_Reduce",
            Coll::Bcast => "MPI_Bcast",
            Coll::Allgather => "MPI_Allgather",
            Coll::ReduceScatterBlock => "MPI_Reduce_scatter_block",
            Coll::ReduceScatter => "MPI_Reduce_scatter",
            Coll::Alltoall => "MPI_Alltoall",
            Coll::Gather => "MPI_Gather",
            Coll::Scatter => "MPI_Scatter",
            Coll::Barrier => "MPI_Barrier",
            Coll::Iallreduce => "MPI_Iallreduce",
            Coll::Ibcast => "MPI_Ibcast",
            Coll::Iallgather => "MPI_Iallgather",
            Coll::IreduceScatterBlock => "MPI_Ireduce_scatter_block",
            Coll::Ibarrier => "MPI_Ibarrier",
            Coll::Allgatherv => "MPI_Allgatherv",
            Coll::Gatherv => "MPI_Gatherv",
            Coll::Scatterv => "MPI_Scatterv",
            Coll::Alltoallv => "MPI_Alltoallv",
            Coll::Scan => "MPI_Scan",
            Coll::Exscan => "MPI_Exscan",
        }
    }

    /// Its name in `RCOLL_MPI_COLLS`: the MPI name without `MPI_`, in lower case
    /// (`allreduce`, `reduce_scatter_block`).
    pub fn key(self) -> String {
        self.mpi_name()["MPI_".len()..].to_ascii_lowercase()
    }

    /// Whether rcoll can serve it at all.
    pub fn servable(self) -> bool {
        Coll::ALL[..15].contains(&self)
    }

    /// The blocking form: what a nonblocking call runs.
    pub fn blocking(self) -> Coll {
        match self {
            Coll::Iallreduce => Coll::Allreduce,
            Coll::Ibcast => Coll::Bcast,
            Coll::Iallgather => Coll::Allgather,
            Coll::IreduceScatterBlock => Coll::ReduceScatterBlock,
            Coll::Ibarrier => Coll::Barrier,
            other => other,
        }
    }

    /// Index in [`Coll::ALL`].
    pub fn index(self) -> usize {
        Coll::ALL
            .iter()
            .position(|&c| c == self)
            .unwrap_or_default()
    }
}

/// Why a call went to MPI. Its text is what the stats line shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `RCOLL_MPI=0`.
    Disabled,
    /// Not in `RCOLL_MPI_COLLS`.
    Restricted,
    /// A collective rcoll has no counterpart for (v-variants, scans).
    NotServed,
    /// MPI was not initialized through the shim's `MPI_Init`.
    NotInitialized,
    /// The communicator has no rcoll communicator (its creation failed).
    NoCommunicator,
    /// An intercommunicator.
    Intercommunicator,
    /// A datatype made by `MPI_Type_*` in a reduction.
    DerivedDatatype,
    /// A predefined datatype rcoll has no type for (its name).
    Datatype(String),
    /// A predefined op rcoll does not have (its name).
    Op(&'static str),
    /// An op made by `MPI_Op_create`.
    UserOp,
    /// An op MPI does not define on the datatype (`MPI_BAND` on floats).
    OpOnDatatype(&'static str, String),
    /// `MPI_Reduce_scatter` with different counts.
    UnequalCounts,
    /// Send and receive sides of different sizes.
    SizesDiffer,
    /// An argument MPI reports as an error (forwarded so that MPI reports it as it would).
    InvalidArgument(&'static str),
    /// Fewer bytes than `RCOLL_MPI_SHM_MIN` (this many) on a communicator inside one host.
    Small(usize),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Disabled => f.write_str("RCOLL_MPI=0"),
            Reason::Restricted => f.write_str("not in RCOLL_MPI_COLLS"),
            Reason::NotServed => f.write_str("not served by rcoll"),
            Reason::NotInitialized => f.write_str("MPI_Init not seen"),
            Reason::NoCommunicator => f.write_str("no rcoll communicator"),
            Reason::Intercommunicator => f.write_str("intercommunicator"),
            Reason::DerivedDatatype => f.write_str("derived datatype"),
            Reason::Datatype(name) => f.write_str(name),
            Reason::Op(name) => f.write_str(name),
            Reason::UserOp => f.write_str("user-defined op"),
            Reason::OpOnDatatype(op, t) => write!(f, "{op} on {t}"),
            Reason::UnequalCounts => f.write_str("unequal recvcounts"),
            Reason::SizesDiffer => f.write_str("send and receive sizes differ"),
            Reason::InvalidArgument(what) => write!(f, "invalid {what}"),
            Reason::Small(min) => write!(f, "under {min} bytes inside one host"),
        }
    }
}

/// What C said of a datatype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeKind {
    /// One of rcoll's numeric types.
    Number(DataType),
    /// `MPI_BYTE`: data, and the bitwise ops.
    Byte,
    /// `MPI_CHAR`: data only.
    Char,
    /// Predefined, no rcoll type.
    Other,
    /// Made by `MPI_Type_*`.
    Derived,
    /// `MPI_DATATYPE_NULL`, or one MPI refused to describe.
    Invalid,
}

/// A datatype: its kind, whether its bytes are one run, its bytes per element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ty {
    /// Kind.
    pub kind: TypeKind,
    /// Size equals extent, lower bound 0.
    pub contiguous: bool,
    /// Bytes of data in one element.
    pub size: usize,
    /// Bytes from one element to the next.
    pub extent: isize,
}

impl Ty {
    /// From `rcoll_mpi_type_info`'s answer (`None`: MPI refused to describe it).
    pub fn from_info(info: Option<crate::ffi::TypeInfo>) -> Ty {
        let invalid = Ty {
            kind: TypeKind::Invalid,
            contiguous: false,
            size: 0,
            extent: 0,
        };
        let Some(info) = info else { return invalid };
        let kind = match info.code {
            type_code::BYTE => TypeKind::Byte,
            type_code::CHAR => TypeKind::Char,
            type_code::DERIVED => TypeKind::Derived,
            type_code::OTHER => TypeKind::Other,
            code => match code_type(code) {
                Some(t) => TypeKind::Number(t),
                None => return invalid,
            },
        };
        Ty {
            kind,
            contiguous: info.contiguous != 0,
            size: usize::try_from(info.size).unwrap_or(0),
            extent: isize::try_from(info.extent).unwrap_or(0),
        }
    }
}

/// rcoll's C datatype code (as `rcollDataType_t`) as a type.
fn code_type(code: i32) -> Option<DataType> {
    Some(match code {
        0 => DataType::I8,
        1 => DataType::U8,
        2 => DataType::I32,
        3 => DataType::U32,
        4 => DataType::I64,
        5 => DataType::U64,
        7 => DataType::F32,
        8 => DataType::F64,
        _ => return None,
    })
}

/// What C said of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// One rcoll has.
    Reduce(ReduceOp),
    /// A logical op (`MPI_LAND`, `MPI_LOR`, `MPI_LXOR`, its name): on integers, the
    /// inputs taken as 0 or 1 and reduced by `Min`, `Max` or `BitXor`, which on 0 and 1
    /// are and, or and exclusive or, giving 0 or 1 as MPI does.
    Logical(ReduceOp, &'static str),
    /// A predefined op rcoll does not have (`MPI_MAXLOC`).
    Named(&'static str),
    /// Made by `MPI_Op_create`.
    User,
    /// `MPI_OP_NULL`.
    Null,
}

impl OpKind {
    /// From `rcoll_mpi_op_code`'s answer (src/shim.c's `RO_*`).
    pub fn from_code(code: i32) -> OpKind {
        match code {
            0 => OpKind::Reduce(ReduceOp::Sum),
            1 => OpKind::Reduce(ReduceOp::Prod),
            2 => OpKind::Reduce(ReduceOp::Max),
            3 => OpKind::Reduce(ReduceOp::Min),
            5 => OpKind::Reduce(ReduceOp::BitAnd),
            6 => OpKind::Reduce(ReduceOp::BitOr),
            7 => OpKind::Reduce(ReduceOp::BitXor),
            -2 => OpKind::Named("MPI_MAXLOC"),
            -3 => OpKind::Named("MPI_MINLOC"),
            -4 => OpKind::Logical(ReduceOp::Min, "MPI_LAND"),
            -5 => OpKind::Logical(ReduceOp::Max, "MPI_LOR"),
            -6 => OpKind::Logical(ReduceOp::BitXor, "MPI_LXOR"),
            -7 => OpKind::Named("MPI_REPLACE"),
            -8 => OpKind::Named("MPI_NO_OP"),
            -1 => OpKind::Null,
            _ => OpKind::User,
        }
    }
}

/// MPI's name of one of rcoll's ops.
fn op_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "MPI_SUM",
        ReduceOp::Prod => "MPI_PROD",
        ReduceOp::Min => "MPI_MIN",
        ReduceOp::Max => "MPI_MAX",
        ReduceOp::BitAnd => "MPI_BAND",
        ReduceOp::BitOr => "MPI_BOR",
        ReduceOp::BitXor => "MPI_BXOR",
        _ => "an rcoll op",
    }
}

/// Reads datatypes on demand: a rank looks only at the datatypes MPI says it uses (a
/// non-root's `recvtype` in `MPI_Gather` may be anything).
pub trait Types<H> {
    /// The datatype.
    fn ty(&self, h: H) -> Ty;
    /// Its name, for a reason.
    fn name(&self, h: H) -> String;
}

/// One side of a call: count, datatype, and what the buffer pointer is.
#[derive(Clone, Copy, Debug)]
pub struct Side<H> {
    /// Elements.
    pub count: i64,
    /// Datatype handle.
    pub dtype: H,
    /// The buffer is `MPI_IN_PLACE`.
    pub in_place: bool,
    /// The buffer is NULL.
    pub null: bool,
}

/// A call's arguments as the decision needs them.
#[derive(Clone, Copy, Debug)]
pub struct Args<'a, H> {
    /// Which collective.
    pub coll: Coll,
    /// This rank in the communicator.
    pub rank: usize,
    /// The communicator's size.
    pub size: usize,
    /// Root (rooted collectives).
    pub root: i32,
    /// Send side (reductions: the datatype is the call's one).
    pub send: Side<H>,
    /// Receive side.
    pub recv: Side<H>,
    /// The op (reductions).
    pub op: OpKind,
    /// `MPI_Reduce_scatter`'s recvcounts.
    pub counts: &'a [i32],
}

/// What rcoll runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `all_reduce`
    AllReduce,
    /// `reduce`
    Reduce,
    /// `broadcast_in_place` (MPI's buffer is both)
    Broadcast,
    /// `all_gather`
    AllGather,
    /// `reduce_scatter`; in place, the result then moves to the buffer's front (MPI's
    /// in-place form of `MPI_Reduce_scatter_block`)
    ReduceScatter,
    /// `all_to_all`
    AllToAll,
    /// `gather`
    Gather,
    /// `scatter`
    Scatter,
    /// `barrier`
    Barrier,
    /// Nothing to move (every rank has zero bytes): done without communicating.
    Nothing,
}

/// A served call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// What rcoll runs.
    pub action: Action,
    /// Element type (`U8` for data movements: bytes).
    pub dtype: DataType,
    /// The op (reductions; `Sum` otherwise).
    pub op: ReduceOp,
    /// Elements: the whole vector (all-reduce, reduce, broadcast) or one rank's block.
    pub count: usize,
    /// rcoll's in-place form on this rank: one buffer (the receive buffer, or for a
    /// scatter's root the send buffer).
    pub in_place: bool,
    /// Root.
    pub root: usize,
    /// The send and the receive side are of a non-contiguous datatype: moved through a
    /// packed copy (`MPI_Pack`, `MPI_Unpack`).
    pub staged: (bool, bool),
    /// A logical op: the inputs are taken as 0 or 1 before `op` reduces them.
    pub logical: bool,
}

impl Plan {
    /// The call's size in bytes, alike on every rank: its count (a reduction's vector, a
    /// reduce-scatter's or a movement's block per rank) times its element's size.
    pub fn bytes(&self) -> usize {
        self.count.saturating_mul(self.dtype.size())
    }

    /// Elements this rank's send and receive buffers hold (0: not used here). In place,
    /// the one buffer is the receive side, except for a scatter's root (the send side).
    pub fn lengths(&self, rank: usize, size: usize) -> (usize, usize) {
        let (c, all, root) = (self.count, self.count * size, rank == self.root);
        let (send, recv) = match self.action {
            Action::AllReduce => (c, c),
            Action::Reduce => (c, if root { c } else { 0 }),
            Action::Broadcast => (0, c),
            Action::AllGather => (c, all),
            Action::ReduceScatter => (all, c),
            Action::AllToAll => (all, all),
            Action::Gather => (c, if root { all } else { 0 }),
            Action::Scatter => (if root { all } else { 0 }, c),
            Action::Barrier | Action::Nothing => (0, 0),
        };
        if !self.in_place {
            return (send, recv);
        }
        match self.action {
            Action::ReduceScatter => (0, all),
            Action::Scatter => (all, 0),
            _ => (0, recv),
        }
    }
}

/// The decision for one call of a servable collective.
pub fn decide<H: Copy>(a: &Args<'_, H>, types: &impl Types<H>) -> Result<Plan, Reason> {
    let a = &Args {
        coll: a.coll.blocking(),
        ..*a
    };
    let rooted = matches!(
        a.coll,
        Coll::Reduce | Coll::Bcast | Coll::Gather | Coll::Scatter
    );
    let root = if rooted {
        match usize::try_from(a.root) {
            Ok(r) if r < a.size => r,
            _ => return Err(Reason::InvalidArgument("root")),
        }
    } else {
        0
    };
    match a.coll {
        Coll::Barrier => Ok(plan(
            Action::Barrier,
            DataType::U8,
            ReduceOp::Sum,
            0,
            false,
            0,
        )),
        Coll::Allreduce | Coll::Reduce | Coll::ReduceScatterBlock | Coll::ReduceScatter => {
            reduction(a, root, types)
        }
        Coll::Bcast | Coll::Allgather | Coll::Alltoall | Coll::Gather | Coll::Scatter => {
            movement(a, root, types)
        }
        _ => Err(Reason::NotServed),
    }
}

fn plan(
    action: Action,
    dtype: DataType,
    op: ReduceOp,
    count: usize,
    in_place: bool,
    root: usize,
) -> Plan {
    Plan {
        action,
        dtype,
        op,
        count,
        in_place,
        root,
        staged: (false, false),
        logical: false,
    }
}

fn reduction<H: Copy>(a: &Args<'_, H>, root: usize, types: &impl Types<H>) -> Result<Plan, Reason> {
    let dtype = a.recv.dtype;
    let count = match a.coll {
        Coll::ReduceScatter => match a.counts.split_first() {
            Some((&first, rest)) if first >= 0 && a.counts.len() == a.size => {
                if rest.iter().any(|&c| c != first) {
                    return Err(Reason::UnequalCounts);
                }
                i64::from(first)
            }
            _ => return Err(Reason::InvalidArgument("recvcounts")),
        },
        _ => a.recv.count,
    };
    let count = usize::try_from(count).map_err(|_| Reason::InvalidArgument("count"))?;
    // A predefined op rcoll lacks names the reason (MPI_MAXLOC comes with MPI_2INT, a
    // predefined pair type); then the datatype; then a user's op.
    let (op, logical) = match a.op {
        OpKind::Reduce(op) => (Some(op), None),
        OpKind::Logical(op, name) => (Some(op), Some(name)),
        OpKind::Named(name) => return Err(Reason::Op(name)),
        OpKind::User => (None, None),
        OpKind::Null => return Err(Reason::InvalidArgument("op")),
    };
    let ty = types.ty(dtype);
    let number = match ty.kind {
        TypeKind::Number(t) => Some(t),
        // MPI defines the bitwise ops on MPI_BYTE.
        TypeKind::Byte if logical.is_none() && op.is_some_and(ReduceOp::is_bitwise) => {
            Some(DataType::U8)
        }
        TypeKind::Byte | TypeKind::Char | TypeKind::Other => None,
        TypeKind::Derived => return Err(Reason::DerivedDatatype),
        TypeKind::Invalid => return Err(Reason::InvalidArgument("datatype")),
    };
    let Some(op) = op else {
        return Err(Reason::UserOp);
    };
    let element = match (number, logical) {
        // MPI defines the logical ops on integers (and C's bool, which rcoll lacks).
        (Some(t), Some(name)) if t.is_float() => {
            return Err(Reason::OpOnDatatype(name, types.name(dtype)))
        }
        (Some(t), _) if t.supports(op) => t,
        (Some(_), _) => return Err(Reason::OpOnDatatype(op_name(op), types.name(dtype))),
        (None, _) => return Err(Reason::Datatype(types.name(dtype))),
    };
    let me_root = a.rank == root;
    let in_place = a.send.in_place;
    if in_place && a.coll == Coll::Reduce && !me_root {
        return Err(Reason::InvalidArgument("MPI_IN_PLACE on a non-root"));
    }
    let action = match a.coll {
        Coll::Allreduce => Action::AllReduce,
        Coll::Reduce => Action::Reduce,
        _ => Action::ReduceScatter,
    };
    let p = Plan {
        logical: logical.is_some(),
        ..plan(action, element, op, count, in_place, root)
    };
    sized(p, a, element.size())
}

fn movement<H: Copy>(a: &Args<'_, H>, root: usize, types: &impl Types<H>) -> Result<Plan, Reason> {
    let me_root = a.rank == root;
    // The sides this rank uses, and the in-place form.
    let (send_used, recv_used, in_place) = match a.coll {
        Coll::Bcast => (false, true, true),
        Coll::Allgather | Coll::Alltoall => (!a.send.in_place, true, a.send.in_place),
        Coll::Gather if me_root => (!a.send.in_place, true, a.send.in_place),
        Coll::Gather => (true, false, false),
        Coll::Scatter if me_root => (true, !a.recv.in_place, a.recv.in_place),
        _ => (false, true, false),
    };
    if !me_root
        && ((a.coll == Coll::Gather && a.send.in_place)
            || (a.coll == Coll::Scatter && a.recv.in_place))
    {
        return Err(Reason::InvalidArgument("MPI_IN_PLACE on a non-root"));
    }
    // Bytes, and whether they are one run: a non-contiguous datatype is packed, not
    // forwarded, since another rank may pass a contiguous one for the same bytes (a root
    // gathering into a matrix's column while the others send vectors).
    let bytes = |s: &Side<H>| -> Result<(usize, bool), Reason> {
        let count = usize::try_from(s.count).map_err(|_| Reason::InvalidArgument("count"))?;
        let ty = types.ty(s.dtype);
        if ty.kind == TypeKind::Invalid {
            return Err(Reason::InvalidArgument("datatype"));
        }
        let bytes = count
            .checked_mul(ty.size)
            .ok_or(Reason::InvalidArgument("count"))?;
        Ok((bytes, !ty.contiguous && bytes > 0))
    };
    let send = if send_used {
        Some(bytes(&a.send)?)
    } else {
        None
    };
    let recv = if recv_used {
        Some(bytes(&a.recv)?)
    } else {
        None
    };
    // Per rank's block (all-to-all: per destination).
    let block = match (send, recv) {
        (Some(s), Some(r)) if s.0 != r.0 => return Err(Reason::SizesDiffer),
        (Some((b, _)), _) | (None, Some((b, _))) => b,
        (None, None) => 0,
    };
    let staged = (send.is_some_and(|s| s.1), recv.is_some_and(|r| r.1));
    let action = match a.coll {
        Coll::Bcast => Action::Broadcast,
        Coll::Allgather => Action::AllGather,
        Coll::Alltoall => Action::AllToAll,
        Coll::Gather => Action::Gather,
        _ => Action::Scatter,
    };
    let p = Plan {
        staged,
        ..plan(action, DataType::U8, ReduceOp::Sum, block, in_place, root)
    };
    sized(p, a, 1)
}

/// The plan, unless its buffers are too large for one object or NULL where they hold
/// data; a call with nothing to move on any rank is done at once.
fn sized<H: Copy>(p: Plan, a: &Args<'_, H>, element: usize) -> Result<Plan, Reason> {
    let whole = p
        .count
        .checked_mul(a.size)
        .and_then(|n| n.checked_mul(element));
    if whole.is_none_or(|b| b > isize::MAX as usize) {
        return Err(Reason::InvalidArgument("count"));
    }
    if p.count == 0 {
        // Zero on every rank: a reduction's count is the same everywhere, a movement's
        // block is equal by MPI's type matching.
        return Ok(Plan {
            action: Action::Nothing,
            ..p
        });
    }
    let (send, recv) = p.lengths(a.rank, a.size);
    if (send > 0 && a.send.null) || (recv > 0 && a.recv.null) {
        return Err(Reason::InvalidArgument("buffer (NULL)"));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Datatype "handles" of the tests: the handle is the type.
    struct Fake;

    impl Types<Ty> for Fake {
        fn ty(&self, h: Ty) -> Ty {
            h
        }
        fn name(&self, h: Ty) -> String {
            format!("{:?}", h.kind)
        }
    }

    fn num(t: DataType) -> Ty {
        Ty {
            kind: TypeKind::Number(t),
            contiguous: true,
            size: t.size(),
            extent: t.size() as isize,
        }
    }

    const BYTE: Ty = Ty {
        kind: TypeKind::Byte,
        contiguous: true,
        size: 1,
        extent: 1,
    };

    fn side(count: i64, dtype: Ty) -> Side<Ty> {
        Side {
            count,
            dtype,
            in_place: false,
            null: false,
        }
    }

    fn args(
        coll: Coll,
        rank: usize,
        size: usize,
        send: Side<Ty>,
        recv: Side<Ty>,
    ) -> Args<'static, Ty> {
        Args {
            coll,
            rank,
            size,
            root: 0,
            send,
            recv,
            op: OpKind::Reduce(ReduceOp::Sum),
            counts: &[],
        }
    }

    fn in_place(mut s: Side<Ty>) -> Side<Ty> {
        s.in_place = true;
        s
    }

    #[test]
    fn reductions_are_served_on_rcolls_types_and_ops() {
        let f64s = num(DataType::F64);
        let a = args(Coll::Allreduce, 1, 4, side(10, f64s), side(10, f64s));
        let p = decide(&a, &Fake).expect("served");
        assert_eq!(
            (p.action, p.dtype, p.op, p.count, p.in_place),
            (Action::AllReduce, DataType::F64, ReduceOp::Sum, 10, false)
        );
        let a = args(
            Coll::Allreduce,
            1,
            4,
            in_place(side(0, f64s)),
            side(10, f64s),
        );
        assert!(decide(&a, &Fake).expect("served").in_place);
        for (code, op) in [
            (0, ReduceOp::Sum),
            (1, ReduceOp::Prod),
            (2, ReduceOp::Max),
            (3, ReduceOp::Min),
            (5, ReduceOp::BitAnd),
            (6, ReduceOp::BitOr),
            (7, ReduceOp::BitXor),
        ] {
            let mut a = args(
                Coll::Allreduce,
                0,
                2,
                side(3, num(DataType::U32)),
                side(3, num(DataType::U32)),
            );
            a.op = OpKind::from_code(code);
            assert_eq!(decide(&a, &Fake).expect("served").op, op);
        }
    }

    #[test]
    fn what_rcoll_lacks_is_forwarded_with_its_reason() {
        let f32s = num(DataType::F32);
        let mut a = args(Coll::Allreduce, 0, 2, side(4, f32s), side(4, f32s));
        a.op = OpKind::from_code(-2);
        assert_eq!(decide(&a, &Fake), Err(Reason::Op("MPI_MAXLOC")));
        assert_eq!(Reason::Op("MPI_MAXLOC").to_string(), "MPI_MAXLOC");
        a.op = OpKind::from_code(-7);
        assert_eq!(decide(&a, &Fake), Err(Reason::Op("MPI_REPLACE")));
        a.op = OpKind::from_code(12345);
        assert_eq!(decide(&a, &Fake), Err(Reason::UserOp));
        a.op = OpKind::Reduce(ReduceOp::BitAnd);
        assert_eq!(
            decide(&a, &Fake).map_err(|r| r.to_string()),
            Err("MPI_BAND on Number(F32)".into())
        );
        let derived = Ty {
            kind: TypeKind::Derived,
            contiguous: true,
            size: 8,
            extent: 8,
        };
        let mut a = args(Coll::Allreduce, 0, 2, side(4, derived), side(4, derived));
        assert_eq!(decide(&a, &Fake), Err(Reason::DerivedDatatype));
        // MPI defines its ops on predefined types only: a derived type comes with a user's
        // op, and is the reason.
        a.op = OpKind::User;
        assert_eq!(decide(&a, &Fake), Err(Reason::DerivedDatatype));
        a.op = OpKind::Named("MPI_MAXLOC");
        assert_eq!(decide(&a, &Fake), Err(Reason::Op("MPI_MAXLOC")));
        assert_eq!(Reason::DerivedDatatype.to_string(), "derived datatype");
        // MPI_BYTE: the bitwise ops only; MPI_CHAR: none.
        let mut a = args(Coll::Allreduce, 0, 2, side(4, BYTE), side(4, BYTE));
        assert!(matches!(decide(&a, &Fake), Err(Reason::Datatype(_))));
        a.op = OpKind::Reduce(ReduceOp::BitXor);
        assert_eq!(decide(&a, &Fake).expect("served").dtype, DataType::U8);
        for coll in [Coll::Allgatherv, Coll::Scan] {
            let a = args(coll, 0, 2, side(4, BYTE), side(4, BYTE));
            assert_eq!(decide(&a, &Fake), Err(Reason::NotServed));
        }
    }

    #[test]
    fn logical_ops_are_served_on_integers_as_min_max_xor_of_truth_values() {
        for (code, op) in [
            (-4, ReduceOp::Min),
            (-5, ReduceOp::Max),
            (-6, ReduceOp::BitXor),
        ] {
            let mut a = args(
                Coll::Allreduce,
                0,
                2,
                side(3, num(DataType::I64)),
                side(3, num(DataType::I64)),
            );
            a.op = OpKind::from_code(code);
            let p = decide(&a, &Fake).expect("served");
            assert!(p.logical);
            assert_eq!((p.op, p.dtype), (op, DataType::I64));
            // Not on floats, nor MPI_BYTE.
            a.send.dtype = num(DataType::F32);
            a.recv.dtype = num(DataType::F32);
            assert!(matches!(decide(&a, &Fake), Err(Reason::OpOnDatatype(_, _))));
            a.send.dtype = BYTE;
            a.recv.dtype = BYTE;
            assert!(matches!(decide(&a, &Fake), Err(Reason::Datatype(_))));
        }
        let a = args(
            Coll::Allreduce,
            0,
            2,
            side(3, num(DataType::U8)),
            side(3, num(DataType::U8)),
        );
        assert!(!decide(&a, &Fake).expect("served").logical);
    }

    #[test]
    fn reduce_scatter_is_served_when_every_count_is_equal() {
        let i32s = num(DataType::I32);
        let mut a = args(Coll::ReduceScatter, 2, 3, side(0, i32s), side(0, i32s));
        a.counts = &[5, 5, 5];
        let p = decide(&a, &Fake).expect("served");
        assert_eq!((p.action, p.count), (Action::ReduceScatter, 5));
        assert_eq!(p.lengths(2, 3), (15, 5));
        a.counts = &[5, 4, 5];
        assert_eq!(decide(&a, &Fake), Err(Reason::UnequalCounts));
        a.counts = &[5, 5];
        assert_eq!(
            decide(&a, &Fake),
            Err(Reason::InvalidArgument("recvcounts"))
        );
        // In place: the input is the whole receive buffer.
        let a = args(
            Coll::ReduceScatterBlock,
            1,
            3,
            in_place(side(0, i32s)),
            side(5, i32s),
        );
        assert_eq!(decide(&a, &Fake).expect("served").lengths(1, 3), (0, 15));
    }

    #[test]
    fn data_moves_as_bytes_whatever_the_contiguous_datatypes() {
        let doubles = num(DataType::F64);
        let pairs = Ty {
            kind: TypeKind::Derived,
            contiguous: true,
            size: 16,
            extent: 16,
        };
        // 4 doubles sent, 2 pairs of doubles received: 32 bytes each.
        let a = args(Coll::Allgather, 1, 3, side(4, doubles), side(2, pairs));
        let p = decide(&a, &Fake).expect("served");
        assert_eq!(
            (p.action, p.dtype, p.count),
            (Action::AllGather, DataType::U8, 32)
        );
        assert_eq!(p.lengths(1, 3), (32, 96));
        let a = args(Coll::Allgather, 1, 3, side(3, doubles), side(2, pairs));
        assert_eq!(decide(&a, &Fake), Err(Reason::SizesDiffer));
        assert_eq!(p.staged, (false, false));
        // A strided type on one side, contiguous on the other: served, the strided side
        // packed (another rank may pass contiguous types for the same call).
        let strided = Ty {
            kind: TypeKind::Derived,
            contiguous: false,
            size: 8,
            extent: 24,
        };
        let a = args(Coll::Alltoall, 0, 2, side(1, strided), side(1, doubles));
        assert_eq!(decide(&a, &Fake).expect("served").staged, (true, false));
        // A root gathering into a column: its receive side packed, the others as they are.
        let a = args(Coll::Gather, 0, 3, side(1, doubles), side(1, strided));
        assert_eq!(decide(&a, &Fake).expect("served").staged, (false, true));
        let a = args(Coll::Gather, 1, 3, side(1, doubles), side(1, strided));
        assert_eq!(decide(&a, &Fake).expect("served").staged, (false, false));
        // MPI_CHAR moves.
        let chars = Ty {
            kind: TypeKind::Char,
            ..BYTE
        };
        let a = args(Coll::Bcast, 1, 2, side(0, chars), side(7, chars));
        assert_eq!(decide(&a, &Fake).expect("served").lengths(1, 2), (0, 7));
    }

    #[test]
    fn a_rank_reads_only_the_sides_mpi_says_it_uses() {
        let garbage = Ty {
            kind: TypeKind::Invalid,
            contiguous: false,
            size: 0,
            extent: 0,
        };
        let ints = num(DataType::I32);
        // Gather: a non-root's receive side is not significant.
        let a = args(Coll::Gather, 1, 3, side(2, ints), side(-7, garbage));
        let p = decide(&a, &Fake).expect("served");
        assert_eq!(p.lengths(1, 3), (8, 0));
        // Its root's is.
        let a = args(Coll::Gather, 0, 3, side(2, ints), side(-7, garbage));
        assert!(decide(&a, &Fake).is_err());
        // Scatter: the root in place keeps its block in the send buffer.
        let mut s = args(
            Coll::Scatter,
            0,
            3,
            side(2, ints),
            in_place(side(0, garbage)),
        );
        s.recv.null = true;
        let p = decide(&s, &Fake).expect("served");
        assert!(p.in_place);
        assert_eq!(p.lengths(0, 3), (24, 0));
        // A non-root's send side is not significant.
        let a = args(Coll::Scatter, 2, 3, side(0, garbage), side(2, ints));
        assert_eq!(decide(&a, &Fake).expect("served").lengths(2, 3), (0, 8));
        // Reduce: a non-root may pass a NULL receive buffer.
        let mut r = args(Coll::Reduce, 1, 2, side(4, ints), side(4, ints));
        r.recv.null = true;
        assert_eq!(decide(&r, &Fake).expect("served").lengths(1, 2), (4, 0));
        r.rank = 0;
        assert_eq!(
            decide(&r, &Fake),
            Err(Reason::InvalidArgument("buffer (NULL)"))
        );
    }

    #[test]
    fn bad_arguments_go_to_mpi_which_reports_them() {
        let ints = num(DataType::I32);
        let mut a = args(Coll::Bcast, 0, 2, side(0, ints), side(4, ints));
        a.root = 2;
        assert_eq!(decide(&a, &Fake), Err(Reason::InvalidArgument("root")));
        a.root = -1;
        assert_eq!(decide(&a, &Fake), Err(Reason::InvalidArgument("root")));
        let a = args(Coll::Allreduce, 0, 2, side(-1, ints), side(-1, ints));
        assert_eq!(decide(&a, &Fake), Err(Reason::InvalidArgument("count")));
        let a = args(
            Coll::Allreduce,
            0,
            2,
            side(i64::MAX / 2, ints),
            side(i64::MAX / 2, ints),
        );
        assert_eq!(decide(&a, &Fake), Err(Reason::InvalidArgument("count")));
        // Reduce with MPI_IN_PLACE off the root.
        let a = args(Coll::Reduce, 1, 2, in_place(side(4, ints)), side(4, ints));
        assert!(matches!(decide(&a, &Fake), Err(Reason::InvalidArgument(_))));
    }

    #[test]
    fn a_nonblocking_call_is_decided_as_its_blocking_form() {
        let f32s = num(DataType::F32);
        let mut a = args(Coll::Iallreduce, 0, 2, side(4, f32s), side(4, f32s));
        assert_eq!(decide(&a, &Fake).expect("served").action, Action::AllReduce);
        a.op = OpKind::Named("MPI_MINLOC");
        assert_eq!(decide(&a, &Fake), Err(Reason::Op("MPI_MINLOC")));
        let a = args(Coll::Ibcast, 1, 2, side(0, f32s), side(3, f32s));
        assert_eq!(decide(&a, &Fake).expect("served").lengths(1, 2), (0, 12));
    }

    #[test]
    fn nothing_to_move_is_served_without_communicating() {
        let ints = num(DataType::I32);
        let mut a = args(Coll::Allreduce, 0, 2, side(0, ints), side(0, ints));
        a.send.null = true;
        a.recv.null = true;
        assert_eq!(decide(&a, &Fake).expect("served").action, Action::Nothing);
    }

    #[test]
    fn keys_and_names() {
        assert_eq!(Coll::ReduceScatterBlock.key(), "reduce_scatter_block");
        assert_eq!(Coll::Allreduce.mpi_name(), "MPI_Allreduce");
        assert!(Coll::Barrier.servable() && !Coll::Allgatherv.servable());
        assert!(Coll::Ibarrier.servable() && Coll::Ibarrier.blocking() == Coll::Barrier);
        assert_eq!(
            Coll::IreduceScatterBlock.blocking(),
            Coll::ReduceScatterBlock
        );
        assert_eq!(Coll::Allreduce.blocking(), Coll::Allreduce);
        for (i, c) in Coll::ALL.into_iter().enumerate() {
            assert_eq!(c.index(), i);
        }
    }
}
