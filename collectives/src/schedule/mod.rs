//! Schedules: what one rank does in a collective, as data.
//!
//! A [`Schedule`] is a list of *steps* (communication rounds, numbered the same on every
//! rank, which give the schedule its meaning and its cost); each step holds this rank's
//! [`Primitive`]s. A primitive names the peer(s) and
//! the local [`Slice`]s (of the input, output or scratch buffer) it reads and writes, in the
//! vocabulary of NCCL's device primitives and MSCCL's instructions:
//!
//! | primitive | effect (`x` = the message received, `⊕` = the reduction) |
//! |---|---|
//! | `Send` | send `src` |
//! | `Recv` | `dst = x` |
//! | `RecvReduceSend` | send `x ⊕ src` |
//! | `RecvReduceCopy` | `dst = x ⊕ src` |
//! | `RecvCopySend` | `dst = x`; send `x` |
//! | `RecvReduceCopySend` | `dst = x ⊕ src`; send `dst` |
//! | `Copy` | `dst = src` |
//! | `Reduce` | `dst = dst ⊕ src` |
//!
//! Matching: on each [`Channel`], the k-th message a rank sends to peer q (in step order,
//! then primitive order, then destination order) is the k-th message q receives from it
//! on that channel. A message belongs to the
//! step of the primitive that sends it; the receiving primitive is in the same or a later
//! step. The meaning of a schedule is "run the steps in order"; the engine keeps only the
//! order that matters — between primitives that touch the same elements — and pipelines
//! everything else segment by segment, within and across steps ([`plan`]).
//!
//! Schedules are pure data: [`verify`] runs them symbolically and [`cost`] prices them.

pub mod cost;
pub mod plan;
pub mod verify;

use std::fmt;

use rcoll_transport::Rank;

/// The collectives rcoll implements.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Collective {
    /// Every rank ends with the reduction of all inputs.
    AllReduce,
    /// The root ends with the reduction of all inputs.
    Reduce,
    /// Every rank ends with the root's input.
    Broadcast,
    /// Every rank ends with all inputs, concatenated in rank order.
    AllGather,
    /// Rank i ends with block i of the reduction of all inputs.
    ReduceScatter,
    /// The root ends with all inputs, concatenated in rank order.
    Gather,
    /// Rank i ends with block i of the root's input.
    Scatter,
    /// Rank i ends with block i of every rank's input, in rank order.
    AllToAll,
    /// No rank leaves before every rank has entered.
    Barrier,
    /// Point-to-point: one rank sends, another receives (not an algorithm's business).
    SendRecv,
}

impl Collective {
    /// Every collective that algorithms schedule (all but [`Collective::SendRecv`]).
    pub const SCHEDULED: [Collective; 9] = [
        Collective::AllReduce,
        Collective::Reduce,
        Collective::Broadcast,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Gather,
        Collective::Scatter,
        Collective::AllToAll,
        Collective::Barrier,
    ];

    /// Every collective, point-to-point last.
    pub const ALL: [Collective; 10] = [
        Collective::AllReduce,
        Collective::Reduce,
        Collective::Broadcast,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Gather,
        Collective::Scatter,
        Collective::AllToAll,
        Collective::Barrier,
        Collective::SendRecv,
    ];

    /// The snake_case name used by the CLI and logs.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::Reduce => "reduce",
            Collective::Broadcast => "broadcast",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            Collective::AllToAll => "all_to_all",
            Collective::Barrier => "barrier",
            Collective::SendRecv => "sendrecv",
        }
    }

    /// Whether the collective has a root rank.
    pub fn is_rooted(self) -> bool {
        matches!(
            self,
            Collective::Reduce | Collective::Broadcast | Collective::Gather | Collective::Scatter
        )
    }

    /// Whether the collective reduces (takes a [`crate::ReduceOp`]).
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter
        )
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl std::str::FromStr for Collective {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.replace('-', "_");
        Collective::ALL
            .into_iter()
            .find(|c| c.name() == s || c.name().replace('_', "") == s)
            .ok_or_else(|| format!("unknown collective {s:?}"))
    }
}

/// The shape of one collective call, identical on every rank.
///
/// `count` is per rank, as in NCCL: the vector length for all_reduce, reduce and broadcast;
/// the block each rank contributes or receives for all_gather, reduce_scatter, gather,
/// scatter and all_to_all (whose full buffers are `count * nranks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// The collective.
    pub collective: Collective,
    /// Number of ranks.
    pub nranks: usize,
    /// Elements per rank (see above).
    pub count: usize,
    /// The root of rooted collectives (ignored otherwise).
    pub root: Rank,
    /// Whether input and output share one buffer.
    pub in_place: bool,
}

impl Layout {
    /// Whether the layout can exist: 1 to [`rcoll_transport::MAX_RANKS`] ranks, a root among
    /// them, and every buffer's length (up to `count * nranks` elements) within the address
    /// space. Why not, otherwise.
    pub fn check(&self) -> Result<(), String> {
        if self.nranks == 0 || self.nranks > rcoll_transport::MAX_RANKS {
            return Err(format!(
                "{} ranks (1 to {} are possible)",
                self.nranks,
                rcoll_transport::MAX_RANKS
            ));
        }
        if self.root.index() >= self.nranks {
            return Err(format!(
                "root {} is not one of {} ranks",
                self.root.0, self.nranks
            ));
        }
        // Scratch and in-place storage reach a few times `count * nranks`: keep them all
        // well inside the address space.
        let total = self
            .count
            .checked_mul(self.nranks)
            .and_then(|t| t.checked_mul(4));
        if total.is_none_or(|t| t > isize::MAX as usize / 16) {
            return Err(format!(
                "{} elements on each of {} ranks overflow the address space",
                self.count, self.nranks
            ));
        }
        Ok(())
    }
}

/// Where a rank's input and output live.
///
/// Out of place, input and output are separate buffers of `input.len` and `output.len`
/// elements. In place there is one buffer of `storage_len` elements, and `input` and
/// `output` are extents inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferLayout {
    /// The input extent.
    pub input: Extent,
    /// The output extent.
    pub output: Extent,
    /// Length of the single buffer when in place.
    pub storage_len: usize,
    /// Whether in place.
    pub in_place: bool,
}

/// A run of `len` elements at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Extent {
    /// First element.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

impl Extent {
    /// `len` elements at `offset`.
    pub const fn new(offset: usize, len: usize) -> Extent {
        Extent { offset, len }
    }

    /// One past the last element.
    pub fn end(self) -> usize {
        self.offset + self.len
    }
}

impl Layout {
    /// The buffers rank `rank` must pass for this call (the lengths the API checks).
    pub fn buffers(&self, rank: Rank) -> BufferLayout {
        let (n, c) = (self.nranks, self.count);
        let is_root = rank == self.root;
        let me = rank.index();
        let (input, output) = match self.collective {
            Collective::AllReduce => (c, c),
            Collective::Reduce => (c, if is_root { c } else { 0 }),
            Collective::Broadcast => (if is_root { c } else { 0 }, c),
            Collective::AllGather => (c, c * n),
            Collective::ReduceScatter => (c * n, c),
            Collective::Gather => (c, if is_root { c * n } else { 0 }),
            Collective::Scatter => (if is_root { c * n } else { 0 }, c),
            Collective::AllToAll => (c * n, c * n),
            Collective::Barrier => (0, 0),
            Collective::SendRecv => (c, c),
        };
        if !self.in_place {
            return BufferLayout {
                input: Extent::new(0, input),
                output: Extent::new(0, output),
                storage_len: 0,
                in_place: false,
            };
        }
        // In place: the smaller extent lives inside the larger one, at this rank's block
        // where the collective has per-rank blocks.
        let (input, output) = match self.collective {
            Collective::AllGather => (Extent::new(me * c, c), Extent::new(0, c * n)),
            Collective::Gather if is_root => (Extent::new(me * c, c), Extent::new(0, c * n)),
            Collective::ReduceScatter => (Extent::new(0, c * n), Extent::new(me * c, c)),
            Collective::Scatter if is_root => (Extent::new(0, c * n), Extent::new(me * c, c)),
            _ => (Extent::new(0, input), Extent::new(0, output)),
        };
        BufferLayout {
            input,
            output,
            storage_len: input.end().max(output.end()),
            in_place: true,
        }
    }
}

/// One of a rank's three buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buffer {
    /// The caller's input.
    Input,
    /// The caller's output.
    Output,
    /// Engine-owned temporary space ([`Schedule::scratch_len`] elements).
    Scratch,
}

/// `len` elements at `offset` in one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slice {
    /// Which buffer.
    pub buf: Buffer,
    /// First element.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

impl Slice {
    /// `len` elements of the input at `offset`.
    pub const fn input(offset: usize, len: usize) -> Slice {
        Slice {
            buf: Buffer::Input,
            offset,
            len,
        }
    }

    /// `len` elements of the output at `offset`.
    pub const fn output(offset: usize, len: usize) -> Slice {
        Slice {
            buf: Buffer::Output,
            offset,
            len,
        }
    }

    /// `len` elements of scratch at `offset`.
    pub const fn scratch(offset: usize, len: usize) -> Slice {
        Slice {
            buf: Buffer::Scratch,
            offset,
            len,
        }
    }

    /// The sub-slice `[start, start + len)` of this slice.
    pub fn sub(self, start: usize, len: usize) -> Slice {
        Slice {
            buf: self.buf,
            offset: self.offset + start,
            len,
        }
    }
}

impl fmt::Display for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.buf {
            Buffer::Input => "in",
            Buffer::Output => "out",
            Buffer::Scratch => "scratch",
        };
        write!(f, "{name}[{}..{}]", self.offset, self.offset + self.len)
    }
}

/// One instruction of a rank's schedule. All slices of a primitive have the same length,
/// which is also the length of the messages it receives and sends.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // fields are named by the table in the module docs
pub enum Primitive {
    Send {
        to: Vec<Rank>,
        src: Slice,
    },
    Recv {
        from: Rank,
        dst: Slice,
    },
    RecvReduceSend {
        from: Rank,
        to: Vec<Rank>,
        src: Slice,
    },
    RecvReduceCopy {
        from: Rank,
        src: Slice,
        dst: Slice,
    },
    RecvCopySend {
        from: Rank,
        to: Vec<Rank>,
        dst: Slice,
    },
    RecvReduceCopySend {
        from: Rank,
        to: Vec<Rank>,
        src: Slice,
        dst: Slice,
    },
    Copy {
        src: Slice,
        dst: Slice,
    },
    Reduce {
        src: Slice,
        dst: Slice,
    },
}

impl Primitive {
    /// The peer this primitive receives from, if any.
    pub fn recv_from(&self) -> Option<Rank> {
        match self {
            Primitive::Recv { from, .. }
            | Primitive::RecvReduceSend { from, .. }
            | Primitive::RecvReduceCopy { from, .. }
            | Primitive::RecvCopySend { from, .. }
            | Primitive::RecvReduceCopySend { from, .. } => Some(*from),
            _ => None,
        }
    }

    /// The peers this primitive sends to (empty if none).
    pub fn send_to(&self) -> &[Rank] {
        match self {
            Primitive::Send { to, .. }
            | Primitive::RecvReduceSend { to, .. }
            | Primitive::RecvCopySend { to, .. }
            | Primitive::RecvReduceCopySend { to, .. } => to,
            _ => &[],
        }
    }

    /// The slice it reads locally, if any (for `Reduce`, the operand other than `dst`).
    pub fn src(&self) -> Option<Slice> {
        match self {
            Primitive::Send { src, .. }
            | Primitive::RecvReduceSend { src, .. }
            | Primitive::RecvReduceCopy { src, .. }
            | Primitive::RecvReduceCopySend { src, .. }
            | Primitive::Copy { src, .. }
            | Primitive::Reduce { src, .. } => Some(*src),
            _ => None,
        }
    }

    /// The slice it writes locally, if any.
    pub fn dst(&self) -> Option<Slice> {
        match self {
            Primitive::Recv { dst, .. }
            | Primitive::RecvReduceCopy { dst, .. }
            | Primitive::RecvCopySend { dst, .. }
            | Primitive::RecvReduceCopySend { dst, .. }
            | Primitive::Copy { dst, .. }
            | Primitive::Reduce { dst, .. } => Some(*dst),
            _ => None,
        }
    }

    /// Whether it applies the reduction.
    pub fn reduces(&self) -> bool {
        matches!(
            self,
            Primitive::RecvReduceSend { .. }
                | Primitive::RecvReduceCopy { .. }
                | Primitive::RecvReduceCopySend { .. }
                | Primitive::Reduce { .. }
        )
    }

    /// Number of elements it moves (the length of each of its slices and messages).
    pub fn len(&self) -> usize {
        self.src().or(self.dst()).map_or(0, |s| s.len)
    }

    /// Whether it moves no elements (it still sends and receives zero-length messages).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The primitive's name in the shared vocabulary.
    pub fn name(&self) -> &'static str {
        match self {
            Primitive::Send { .. } => "Send",
            Primitive::Recv { .. } => "Recv",
            Primitive::RecvReduceSend { .. } => "RecvReduceSend",
            Primitive::RecvReduceCopy { .. } => "RecvReduceCopy",
            Primitive::RecvCopySend { .. } => "RecvCopySend",
            Primitive::RecvReduceCopySend { .. } => "RecvReduceCopySend",
            Primitive::Copy { .. } => "Copy",
            Primitive::Reduce { .. } => "Reduce",
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        if let Some(from) = self.recv_from() {
            write!(f, " from {}", from.0)?;
        }
        let to = self.send_to();
        if !to.is_empty() {
            let peers: Vec<String> = to.iter().map(|r| r.0.to_string()).collect();
            write!(f, " to {}", peers.join(","))?;
        }
        if let Some(src) = self.src() {
            write!(f, " src {src}")?;
        }
        if let Some(dst) = self.dst() {
            write!(f, " dst {dst}")?;
        }
        Ok(())
    }
}

/// One channel of a schedule: its own sequence of steps with its own message numbering.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Channel {
    /// `steps[s]` holds this rank's primitives in the channel's step `s` (often empty).
    pub steps: Vec<Vec<Primitive>>,
}

/// What one rank does in one collective: its primitives, step by step, on one or more
/// channels.
///
/// Channels (NCCL's word) are independent lanes that run concurrently, such as the two
/// trees of `double_binary_tree`; each has its own steps and numbers its messages on its
/// own, so two channels may talk to the same peer in different orders. Channels must not
/// touch overlapping memory when one of them writes it (the verifier checks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The call this schedule implements.
    pub layout: Layout,
    /// The rank that runs it.
    pub rank: Rank,
    /// The channels (at least one).
    pub channels: Vec<Channel>,
    /// Elements of scratch space the schedule uses.
    pub scratch_len: usize,
}

impl Schedule {
    /// An empty single-channel schedule for `rank`.
    pub fn new(layout: Layout, rank: Rank) -> Schedule {
        Schedule {
            layout,
            rank,
            channels: vec![Channel::default()],
            scratch_len: 0,
        }
    }

    /// Adds `prim` to step `step` of channel 0, growing the step list as needed.
    pub fn push(&mut self, step: usize, prim: Primitive) {
        self.push_on(0, step, prim);
    }

    /// Adds `prim` to step `step` of `channel`; records scratch use.
    pub fn push_on(&mut self, channel: usize, step: usize, prim: Primitive) {
        for s in [prim.src(), prim.dst()].into_iter().flatten() {
            if s.buf == Buffer::Scratch {
                self.scratch_len = self.scratch_len.max(s.offset + s.len);
            }
        }
        if self.channels.len() <= channel {
            self.channels.resize_with(channel + 1, Channel::default);
        }
        let steps = &mut self.channels[channel].steps;
        if steps.len() <= step {
            steps.resize_with(step + 1, Vec::new);
        }
        let at = &mut steps[step];
        // Most steps hold one primitive: room for exactly one (a push would make room
        // for four), a quarter of the memory, and a chunk small enough for the
        // allocator's fast lists when schedules of thousands of steps are made and
        // dropped by the hundred (pricing at scale).
        if at.capacity() == 0 {
            at.reserve_exact(1);
        }
        at.push(prim);
    }

    /// Joins single-rank schedules of the same call as the channels of one schedule.
    pub fn merge_channels(parts: Vec<Schedule>) -> Option<Schedule> {
        let mut parts = parts.into_iter();
        let mut merged = parts.next()?;
        for p in parts {
            merged.scratch_len = merged.scratch_len.max(p.scratch_len);
            merged.channels.extend(p.channels);
        }
        Some(merged)
    }

    /// Number of primitives over all channels and steps.
    pub fn primitive_count(&self) -> usize {
        self.channels
            .iter()
            .flat_map(|c| &c.steps)
            .map(Vec::len)
            .sum()
    }

    /// Every primitive with its channel and step.
    pub fn primitives(&self) -> impl Iterator<Item = (usize, usize, &Primitive)> {
        self.channels.iter().enumerate().flat_map(|(c, ch)| {
            ch.steps
                .iter()
                .enumerate()
                .flat_map(move |(s, prims)| prims.iter().map(move |p| (c, s, p)))
        })
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} rank {} of {} (count {}, root {}, {})",
            self.layout.collective,
            self.rank.0,
            self.layout.nranks,
            self.layout.count,
            self.layout.root.0,
            if self.layout.in_place {
                "in place"
            } else {
                "out of place"
            }
        )?;
        for (c, s, p) in self.primitives() {
            writeln!(f, "  channel {c} step {s:>3}: {p}")?;
        }
        Ok(())
    }
}
