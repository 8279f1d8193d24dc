//! Algorithms: pure schedule generators `(layout, rank) -> Schedule`.
//!
//! Each algorithm lives in its own file, which opens with its diagram, steps, bytes per rank
//! and alpha-beta cost. Tree-shaped algorithms share the machinery in [`trees`].
//!
//! | algorithm | all_reduce | reduce | broadcast | all_gather | reduce_scatter | gather | scatter | all_to_all | barrier |
//! |---|---|---|---|---|---|---|---|---|---|
//! | `mesh` | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ |
//! | `single_root` | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ |
//! | `tree` | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | | ✓ |
//! | `binomial_tree` | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | | ✓ |
//! | `naive_ring` | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | | ✓ |
//! | `ring` | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ |
//! | `double_binary_tree` | ✓ | ✓ | ✓ | | | | | | ✓ |
//! | `halving_doubling` | ✓ | | | ✓ | ✓ | | | | ✓ |
//! | `recursive_doubling` | ✓ | | | | | | | | ✓ |
//! | `hierarchical` | ✓ | ✓ | ✓ | | | | | | |
//!
//! Common to all: with one rank every collective is a local copy (or nothing, in place);
//! a barrier is the algorithm's all_reduce of zero elements (the engine still sends one
//! empty message per transfer); an algorithm that cannot work in place for a collective
//! first copies its input to scratch ([`in_place_via_scratch`]).

pub mod binomial_tree;
pub mod double_binary_tree;
pub mod halving_doubling;
pub mod hierarchical;
pub mod mesh;
pub mod naive_ring;
mod recent;
pub mod recursive_doubling;
pub mod ring;
pub mod single_root;
pub mod tree;
pub mod trees;

use std::fmt;

use rcoll_transport::Rank;

use crate::schedule::{Buffer, Collective, Extent, Layout, Primitive, Schedule, Slice};

/// The algorithms, by the names the CLI and `RCOLL_ALGO` use.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Algorithm {
    /// Everyone sends to everyone directly.
    Mesh,
    /// Everything goes through one root (rank 0 for unrooted collectives).
    SingleRoot,
    /// A binary tree: reduce up, broadcast down.
    Tree,
    /// A binomial tree.
    BinomialTree,
    /// A chain around the ring carrying the whole vector at each step.
    NaiveRing,
    /// The pipelined ring: reduce-scatter then all-gather, rank i starting with chunk i.
    Ring,
    /// NCCL's double binary tree: two complementary trees, half the data each.
    DoubleBinaryTree,
    /// Recursive halving and doubling (Rabenseifner for all_reduce).
    HalvingDoubling,
    /// The whole vector exchanged with partners at distance 1, 2, 4, ... (all_reduce).
    RecursiveDoubling,
    /// A local level inside each host and a global one across hosts ([`hierarchical`]);
    /// the flat ring where the group has one level.
    Hierarchical,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 10] = [
        Algorithm::Mesh,
        Algorithm::SingleRoot,
        Algorithm::Tree,
        Algorithm::BinomialTree,
        Algorithm::NaiveRing,
        Algorithm::Ring,
        Algorithm::DoubleBinaryTree,
        Algorithm::HalvingDoubling,
        Algorithm::Hierarchical,
        Algorithm::RecursiveDoubling,
    ];

    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Mesh => "mesh",
            Algorithm::SingleRoot => "single_root",
            Algorithm::Tree => "tree",
            Algorithm::BinomialTree => "binomial_tree",
            Algorithm::NaiveRing => "naive_ring",
            Algorithm::Ring => "ring",
            Algorithm::DoubleBinaryTree => "double_binary_tree",
            Algorithm::HalvingDoubling => "halving_doubling",
            Algorithm::RecursiveDoubling => "recursive_doubling",
            Algorithm::Hierarchical => "hierarchical",
        }
    }

    /// Whether this algorithm can schedule `collective`.
    pub fn serves(self, collective: Collective) -> bool {
        use Collective as C;
        match self {
            Algorithm::Mesh | Algorithm::SingleRoot | Algorithm::Ring => collective != C::SendRecv,
            Algorithm::Tree | Algorithm::BinomialTree | Algorithm::NaiveRing => {
                !matches!(collective, C::AllToAll | C::SendRecv)
            }
            Algorithm::DoubleBinaryTree => {
                matches!(
                    collective,
                    C::AllReduce | C::Reduce | C::Broadcast | C::Barrier
                )
            }
            Algorithm::HalvingDoubling => matches!(
                collective,
                C::AllReduce | C::AllGather | C::ReduceScatter | C::Barrier
            ),
            Algorithm::RecursiveDoubling => matches!(collective, C::AllReduce | C::Barrier),
            Algorithm::Hierarchical => hierarchical::serves(collective),
        }
    }

    /// Rank `rank`'s schedule for `layout`, all ranks on one host.
    pub fn schedule(self, layout: &Layout, rank: Rank) -> Result<Schedule, ScheduleError> {
        self.schedule_on(layout, rank, None)
    }

    /// Rank `rank`'s schedule for `layout` when the ranks run on `hosts` (only
    /// [`Algorithm::Hierarchical`] looks; `None` is one host), levels by the ring.
    pub fn schedule_on(
        self,
        layout: &Layout,
        rank: Rank,
        hosts: Option<&rcoll_transport::hosts::HostMap>,
    ) -> Result<Schedule, ScheduleError> {
        self.schedule_levels(
            layout,
            rank,
            hosts,
            hierarchical::LevelAlgorithms::default(),
        )
    }

    /// Like [`Algorithm::schedule_on`], [`Algorithm::Hierarchical`] running its levels by
    /// `levels` (the other algorithms ignore it).
    pub fn schedule_levels(
        self,
        layout: &Layout,
        rank: Rank,
        hosts: Option<&rcoll_transport::hosts::HostMap>,
        levels: hierarchical::LevelAlgorithms,
    ) -> Result<Schedule, ScheduleError> {
        if let Err(reason) = layout.check() {
            return Err(ScheduleError::InvalidLayout {
                layout: *layout,
                reason,
            });
        }
        if rank.index() >= layout.nranks {
            return Err(ScheduleError::InvalidLayout {
                layout: *layout,
                reason: format!("{rank} is not a rank of {}", layout.nranks),
            });
        }
        if !self.serves(layout.collective) {
            return Err(ScheduleError::Unsupported(UnsupportedAlgorithm {
                algorithm: self,
                collective: layout.collective,
            }));
        }
        if layout.nranks == 1 {
            return Ok(local_only(layout, rank));
        }
        if layout.collective == Collective::Barrier {
            let as_all_reduce = Layout {
                collective: Collective::AllReduce,
                count: 0,
                in_place: false,
                ..*layout
            };
            let mut s = self.generate(&as_all_reduce, rank, hosts, levels);
            s.layout = *layout;
            return Ok(s);
        }
        if layout.in_place && !self.native_in_place(layout.collective) {
            return in_place_via_scratch(layout, rank, |l| self.generate(l, rank, hosts, levels))
                .ok_or(ScheduleError::Unsupported(UnsupportedAlgorithm {
                    algorithm: self,
                    collective: layout.collective,
                }));
        }
        Ok(self.generate(layout, rank, hosts, levels))
    }

    /// Every rank's schedule for `layout`, `result[r]` for rank `r`.
    pub fn schedules(self, layout: &Layout) -> Result<Vec<Schedule>, ScheduleError> {
        self.schedules_on(layout, None)
    }

    /// Every rank's schedule for `layout` on `hosts`, `result[r]` for rank `r`.
    pub fn schedules_on(
        self,
        layout: &Layout,
        hosts: Option<&rcoll_transport::hosts::HostMap>,
    ) -> Result<Vec<Schedule>, ScheduleError> {
        self.schedules_levels(layout, hosts, hierarchical::LevelAlgorithms::default())
    }

    /// Every rank's schedule for `layout` on `hosts` with `levels`, `result[r]` for rank `r`.
    pub fn schedules_levels(
        self,
        layout: &Layout,
        hosts: Option<&rcoll_transport::hosts::HostMap>,
        levels: hierarchical::LevelAlgorithms,
    ) -> Result<Vec<Schedule>, ScheduleError> {
        (0..layout.nranks)
            .map(|r| self.schedule_levels(layout, Rank::from(r), hosts, levels))
            .collect()
    }

    /// A level's sub-schedule ([`hierarchical`]): valid by construction, so an error
    /// (which would be a bug) becomes an empty schedule that the verifier rejects.
    pub(crate) fn generate_checked(self, layout: &Layout, rank: Rank) -> Schedule {
        self.schedule(layout, rank)
            .unwrap_or_else(|_| Schedule::new(*layout, rank))
    }

    fn native_in_place(self, collective: Collective) -> bool {
        collective != Collective::AllToAll
    }

    fn generate(
        self,
        layout: &Layout,
        rank: Rank,
        hosts: Option<&rcoll_transport::hosts::HostMap>,
        levels: hierarchical::LevelAlgorithms,
    ) -> Schedule {
        match self {
            Algorithm::Mesh => mesh::schedule(layout, rank),
            Algorithm::SingleRoot => single_root::schedule(layout, rank),
            Algorithm::Tree => tree::schedule(layout, rank),
            Algorithm::BinomialTree => binomial_tree::schedule(layout, rank),
            Algorithm::NaiveRing => naive_ring::schedule(layout, rank, hosts),
            Algorithm::Ring => ring::schedule(layout, rank, hosts),
            Algorithm::DoubleBinaryTree => double_binary_tree::schedule(layout, rank),
            Algorithm::HalvingDoubling => halving_doubling::schedule(layout, rank),
            Algorithm::RecursiveDoubling => recursive_doubling::schedule(layout, rank),
            Algorithm::Hierarchical => hierarchical::schedule(layout, rank, hosts, levels),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl std::str::FromStr for Algorithm {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase().replace('-', "_");
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
                format!(
                    "unknown algorithm {s:?} (expected auto or one of {})",
                    names.join(", ")
                )
            })
    }
}

/// An algorithm asked for a collective it does not schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnsupportedAlgorithm {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The collective.
    pub collective: Collective,
}

impl fmt::Display for UnsupportedAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "algorithm {} does not implement {}",
            self.algorithm, self.collective
        )
    }
}

impl std::error::Error for UnsupportedAlgorithm {}

/// Why there is no schedule for a layout.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The algorithm does not implement the collective.
    Unsupported(UnsupportedAlgorithm),
    /// The layout cannot exist (no ranks, a root outside the group, a size past the address
    /// space).
    InvalidLayout {
        /// The layout.
        layout: Layout,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::Unsupported(u) => u.fmt(f),
            ScheduleError::InvalidLayout { layout, reason } => {
                write!(f, "no schedule for {}: {reason}", layout.collective)
            }
        }
    }
}

impl std::error::Error for ScheduleError {}

/// Splits `count` elements into `parts` contiguous extents whose sizes differ by at most
/// one, the larger ones first.
pub fn partition(count: usize, parts: usize) -> Vec<Extent> {
    let parts = parts.max(1);
    let (base, extra) = (count / parts, count % parts);
    let mut offset = 0;
    (0..parts)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let e = Extent::new(offset, len);
            offset += len;
            e
        })
        .collect()
}

/// Memory of [`partition_shared`].
type Partitions = recent::Recent<(usize, usize), std::rc::Rc<Vec<Extent>>>;

thread_local! {
    static PARTITIONS: std::cell::RefCell<Partitions> =
        const { std::cell::RefCell::new(recent::Recent::new(4)) };
}

/// [`partition`], shared with the calls made just before on this thread (every rank of a
/// layout cuts the vector the same way: see [`recent`]).
pub(crate) fn partition_shared(count: usize, parts: usize) -> std::rc::Rc<Vec<Extent>> {
    recent::recall(&PARTITIONS, (count, parts), || {
        std::rc::Rc::new(partition(count, parts))
    })
}

/// `(rank + delta) mod n` for a signed `delta`.
pub fn ring_peer(rank: Rank, delta: isize, n: usize) -> Rank {
    let n = n as isize;
    Rank::from((rank.index() as isize + delta).rem_euclid(n) as usize)
}

/// The one-rank schedule: copy input to output unless they are the same memory.
fn local_only(layout: &Layout, rank: Rank) -> Schedule {
    let mut s = Schedule::new(*layout, rank);
    let b = layout.buffers(rank);
    if !layout.in_place && b.input.len > 0 && b.input.len == b.output.len {
        s.push(
            0,
            Primitive::Copy {
                src: Slice::input(0, b.input.len),
                dst: Slice::output(0, b.output.len),
            },
        );
    }
    s
}

/// Runs an out-of-place schedule in place: first copy the input to scratch, then run the
/// out-of-place schedule reading that copy instead of the input. The copy orders itself
/// before every reader through the scratch dependency; there is no order across channels,
/// so this works for single-channel schedules only (`None` otherwise).
pub fn in_place_via_scratch(
    layout: &Layout,
    rank: Rank,
    generate: impl FnOnce(&Layout) -> Schedule,
) -> Option<Schedule> {
    let out_of_place = Layout {
        in_place: false,
        ..*layout
    };
    let inner = generate(&out_of_place);
    if inner.channels.len() != 1 {
        return None;
    }
    let input_len = layout.buffers(rank).input.len;
    let base = inner.scratch_len;
    let moved = |s: Slice| match s.buf {
        Buffer::Input => Slice::scratch(base + s.offset, s.len),
        _ => s,
    };
    let mut s = Schedule::new(*layout, rank);
    if input_len > 0 {
        s.push(
            0,
            Primitive::Copy {
                src: Slice::input(0, input_len),
                dst: Slice::scratch(base, input_len),
            },
        );
    }
    for (c, step, p) in inner.primitives() {
        s.push_on(c, step + 1, map_slices(p.clone(), moved));
    }
    s.scratch_len = s.scratch_len.max(inner.scratch_len);
    Some(s)
}

/// Applies `f` to every slice of `p`.
pub fn map_slices(p: Primitive, f: impl Fn(Slice) -> Slice) -> Primitive {
    use Primitive as P;
    match p {
        P::Send { to, src } => P::Send { to, src: f(src) },
        P::Recv { from, dst } => P::Recv { from, dst: f(dst) },
        P::RecvReduceSend { from, to, src } => P::RecvReduceSend {
            from,
            to,
            src: f(src),
        },
        P::RecvReduceCopy { from, src, dst } => P::RecvReduceCopy {
            from,
            src: f(src),
            dst: f(dst),
        },
        P::RecvCopySend { from, to, dst } => P::RecvCopySend {
            from,
            to,
            dst: f(dst),
        },
        P::RecvReduceCopySend { from, to, src, dst } => P::RecvReduceCopySend {
            from,
            to,
            src: f(src),
            dst: f(dst),
        },
        P::Copy { src, dst } => P::Copy {
            src: f(src),
            dst: f(dst),
        },
        P::Reduce { src, dst } => P::Reduce {
            src: f(src),
            dst: f(dst),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_spreads_the_remainder_over_the_first_parts() {
        let p = partition(10, 4);
        assert_eq!(p.iter().map(|e| e.len).collect::<Vec<_>>(), [3, 3, 2, 2]);
        assert_eq!(p[3].end(), 10);
        assert!(partition(2, 5).iter().skip(2).all(|e| e.len == 0));
    }

    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
        }
        assert!("bogus".parse::<Algorithm>().is_err());
    }
}
