//! Hierarchical schedules: a *local* part among the ranks of each host and a *global*
//! part across hosts, each a flat algorithm's schedule embedded into one (seed 002's
//! local/global split; NCCL's intra-node rings under inter-node trees; Open MPI's
//! coll/han).
//!
//! # all_reduce: reduce-scatter inside, all_reduce across, all-gather inside
//!
//! The vector is cut into `P` shards, `P` the largest number of ranks on any host. On a
//! host of `L` ranks, shard `j` belongs to local rank `j mod L`. Shard `j` runs on
//! channel `j`, in three phases:
//!
//! ```text
//!   host A (ranks 0 1 2)       host B (ranks 3 4 5)
//!   1. local reduce of shard j to its owner         (the local level's algorithm)
//!   2. all_reduce of shard j among the owners of j   (the global level's, one rank per host)
//!   3. local broadcast of shard j from its owner     (the local level's)
//! ```
//!
//! Each level runs a flat algorithm of its own ([`LevelAlgorithms`]): the ring at both by
//! default; `auto` prices each level at its own rates ([`crate::select::choose_levels`]), and
//! `RCOLL_LEVEL_ALGO` forces them. The byte counts below are the rings'.
//!
//! Every local rank drives its own shards across the network, as NCCL and han do; with
//! even hosts the first and last phases together are a reduce-scatter and an all-gather.
//! Uneven hosts (3 + 1) work the same way: a rank of a smaller host owns several shards.
//! Per rank, the local phases move about `2 (L-1)/L` of the vector through shared memory
//! and the global phase `2 (H-1)/H` of its shards through the network: each host's link
//! carries `2 (H-1)/H` of the vector in all, against `2 (p-1)/p` for a flat ring.
//!
//! # broadcast and reduce: a tree of hosts over chains inside them
//!
//! Each host has a leader: the root on its host, local rank 0 elsewhere. Broadcast is a
//! broadcast among the leaders, then one inside every host from its leader; reduce is a
//! reduce inside every host to its leader (into scratch, on a leader that is not the
//! root), then a reduce among the leaders to the root. One channel: the engine pipelines
//! the levels segment by segment.
//!
//! # all_gather and reduce_scatter: one channel per local rank
//!
//! Channel `c` carries the blocks of every host's local rank `c` (its *column*; a host of
//! fewer ranks has no block there, and its rank `c mod L` serves the column for it).
//! all_gather: the column's ranks all_gather their blocks across hosts; a host without
//! the column gets them from one that has it; then each host's server of the column
//! broadcasts them inside the host, block by block. reduce_scatter is the mirror: inside
//! every host the column's blocks are reduced to its server (into scratch), hosts without
//! the column add theirs into one that has it, and the column's ranks reduce-scatter
//! across hosts, each keeping its own block. So each host's link carries `(H-1)/H` of
//! the vector, against `(p-1)/p` for a flat ring, and every local rank drives its share.
//!
//! Other collectives are not hierarchical yet: [`super::Algorithm::serves`] says so and
//! the flat algorithms serve them.
//!
//! Sub-schedules are generated for virtual ranks `0..group.len()` of a sub-layout and
//! embedded: peers through the group, the sub-layout's buffers onto slices of this call's,
//! its scratch after what the earlier phases use, its steps after theirs (the same offsets
//! on every rank, computed from the host map, so that a message's sender and receiver
//! agree on its step).

use rcoll_transport::hosts::HostMap;
use rcoll_transport::Rank;

use super::{map_slices, partition, Algorithm};
use crate::schedule::{Buffer, Collective, Extent, Layout, Primitive, Schedule, Slice};

mod levels;
mod rooted;

pub(crate) use levels::level_algorithm;
pub use levels::{LevelAlgorithms, LEVEL_CANDIDATES};

/// Whether the hierarchical algorithm serves `collective`.
pub fn serves(collective: Collective) -> bool {
    matches!(
        collective,
        Collective::AllReduce
            | Collective::Broadcast
            | Collective::Reduce
            | Collective::AllGather
            | Collective::ReduceScatter
    )
}

/// Whether `hosts` has two levels: more than one host, and a host with more than one rank.
pub fn has_levels(hosts: &HostMap) -> bool {
    hosts.nhosts() > 1 && hosts.nhosts() < hosts.nranks()
}

/// Rank `rank`'s hierarchical schedule for `layout` over `hosts`, each level run by the
/// algorithm `levels` names for it (the flat ring when there is only one level).
pub fn schedule(
    layout: &Layout,
    rank: Rank,
    hosts: Option<&HostMap>,
    levels: LevelAlgorithms,
) -> Schedule {
    let hosts = match hosts {
        Some(h) if h.nranks() == layout.nranks && has_levels(h) => h,
        _ => return super::ring::schedule(layout, rank, hosts),
    };
    match layout.collective {
        Collective::AllReduce => all_reduce(layout, rank, hosts, levels),
        Collective::Broadcast => rooted::broadcast(layout, rank, hosts, levels),
        Collective::Reduce => rooted::reduce(layout, rank, hosts, levels),
        Collective::AllGather => all_gather(layout, rank, hosts, levels),
        Collective::ReduceScatter => reduce_scatter(layout, rank, hosts, levels),
        // The flat ring in host order.
        _ => super::ring::schedule(layout, rank, Some(hosts)),
    }
}

/// Where one phase's sub-schedule goes in the schedule being built.
struct Phase<'a> {
    /// The sub-layout's virtual ranks, as ranks of this call.
    group: &'a [Rank],
    /// Channel of this call the phase runs on.
    channel: usize,
    /// Step of this call its step 0 becomes.
    step: usize,
    /// Where the sub-layout's input and output go (scratch is placed automatically).
    input: Place<'a>,
    output: Place<'a>,
}

/// Where a sub-layout's input or output goes: one slice, or blocks that lie apart in this
/// call's buffers (the blocks of one local rank on every host).
#[derive(Clone, Copy)]
enum Place<'a> {
    Slice(Slice),
    /// Virtual block `k` (of `block` elements) is `at[k]`.
    Blocks {
        block: usize,
        at: &'a [Slice],
    },
}

impl From<Slice> for Place<'_> {
    fn from(s: Slice) -> Self {
        Place::Slice(s)
    }
}

impl Place<'_> {
    /// The part `offset..offset + len` of the sub-layout's output.
    fn sub(self, offset: usize, len: usize) -> Slice {
        match self {
            Place::Slice(s) => s.sub(offset, len),
            Place::Blocks { block, at } => {
                let k = offset / block.max(1);
                let within = offset - k * block;
                assert!(within + len <= block, "a level's slice spans two blocks");
                at[k].sub(within, len)
            }
        }
    }
}

/// Embeds virtual rank `me`'s schedule of `sub` (by `algorithm`, see [`level_algorithm`])
/// into `out` as `phase`.
fn embed(out: &mut Schedule, sub: &Layout, me: usize, phase: &Phase<'_>, algorithm: Algorithm) {
    let s = level_algorithm(algorithm, sub).generate_checked(sub, Rank::from(me));
    assert!(
        s.channels.len() <= 1,
        "a level's algorithm must use one channel"
    );
    let base = out.scratch_len;
    let group = phase.group;
    let slice = |s: Slice| match s.buf {
        Buffer::Input => phase.input.sub(s.offset, s.len),
        Buffer::Output => phase.output.sub(s.offset, s.len),
        Buffer::Scratch => Slice::scratch(base + s.offset, s.len),
    };
    for (_, step, p) in s.primitives() {
        let p = map_peers(map_slices(p.clone(), slice), |r| group[r.index()]);
        out.push_on(phase.channel, phase.step + step, p);
    }
    out.scratch_len = out.scratch_len.max(base + s.scratch_len);
}

/// Applies `f` to every peer of `p`.
fn map_peers(p: Primitive, f: impl Fn(Rank) -> Rank) -> Primitive {
    use Primitive as P;
    let all = |to: Vec<Rank>| to.into_iter().map(&f).collect();
    match p {
        P::Send { to, src } => P::Send { to: all(to), src },
        P::Recv { from, dst } => P::Recv { from: f(from), dst },
        P::RecvReduceSend { from, to, src } => P::RecvReduceSend {
            from: f(from),
            to: all(to),
            src,
        },
        P::RecvReduceCopy { from, src, dst } => P::RecvReduceCopy {
            from: f(from),
            src,
            dst,
        },
        P::RecvCopySend { from, to, dst } => P::RecvCopySend {
            from: f(from),
            to: all(to),
            dst,
        },
        P::RecvReduceCopySend { from, to, src, dst } => P::RecvReduceCopySend {
            from: f(from),
            to: all(to),
            src,
            dst,
        },
        other => other,
    }
}

thread_local! {
    /// [`steps_of`]'s recent answers: every rank of a call asks the same few questions,
    /// each of which generates every virtual rank's schedule of a level.
    static STEPS: std::cell::RefCell<super::recent::Recent<(Layout, Algorithm), usize>> =
        const { std::cell::RefCell::new(super::recent::Recent::new(64)) };
}

/// Steps the sub-layout takes at a level that runs `algorithm`: the most any of its
/// virtual ranks uses.
fn steps_of(sub: &Layout, algorithm: Algorithm) -> usize {
    let algorithm = level_algorithm(algorithm, sub);
    super::recent::recall(&STEPS, (*sub, algorithm), || count_steps(sub, algorithm))
}

fn count_steps(sub: &Layout, algorithm: Algorithm) -> usize {
    // A ring all_reduce gives every rank the same steps (0 to 2(p-1), tested below):
    // rank 0's count is everyone's, without generating p schedules of p steps.
    let ranks = if sub.collective == Collective::AllReduce && algorithm == Algorithm::Ring {
        1
    } else {
        sub.nranks
    };
    (0..ranks)
        .map(|v| {
            algorithm
                .generate_checked(sub, Rank::from(v))
                .channels
                .iter()
                .map(|c| c.steps.len())
                .max()
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

pub(crate) fn sub_layout(
    collective: Collective,
    nranks: usize,
    count: usize,
    root: usize,
    in_place: bool,
) -> Layout {
    Layout {
        collective,
        nranks,
        count,
        root: Rank::from(root),
        in_place,
    }
}

fn all_reduce(layout: &Layout, rank: Rank, hosts: &HostMap, lv: LevelAlgorithms) -> Schedule {
    let mut out = Schedule::new(*layout, rank);
    let nhosts = hosts.nhosts();
    let me_host = hosts.host_of(rank);
    let local = hosts.members(me_host);
    let me_local = hosts.local_rank(rank);
    let shards_n = (0..nhosts)
        .map(|h| hosts.members(h).len())
        .max()
        .unwrap_or(1);
    let shards = partition(layout.count, shards_n);
    let owner = |h: usize, j: usize| {
        let m = hosts.members(h);
        m[j % m.len()]
    };
    // Step offsets, the same on every rank: the longest local reduce of any host, then
    // the longest all_reduce across hosts.
    let sizes: std::collections::BTreeSet<usize> =
        (0..nhosts).map(|h| hosts.members(h).len()).collect();
    let biggest = shards.first().map_or(0, |e| e.len);
    let local_steps = sizes
        .iter()
        .flat_map(|&l| {
            (0..l).map(move |root| {
                steps_of(
                    &sub_layout(Collective::Reduce, l, biggest, root, layout.in_place),
                    lv.local,
                )
            })
        })
        .max()
        .unwrap_or(0);
    let global_steps = steps_of(
        &sub_layout(Collective::AllReduce, nhosts, biggest, 0, true),
        lv.global,
    );
    // The caller's data: in place, the one buffer (its input and output extents are
    // the whole of it); out of place, the input, then the output.
    let (input, output) = (
        Slice::input(0, layout.count),
        Slice::output(0, layout.count),
    );
    for (j, e) in shards.iter().enumerate() {
        let Extent { offset, len } = *e;
        if len == 0 {
            continue;
        }
        let mine = output.sub(offset, len);
        let owner_here = owner(me_host, j);
        let root_local = hosts.local_rank(owner_here);
        // 1. Reduce the shard to its owner on this host.
        embed(
            &mut out,
            &sub_layout(
                Collective::Reduce,
                local.len(),
                len,
                root_local,
                layout.in_place,
            ),
            me_local,
            &Phase {
                group: local,
                channel: j,
                step: 0,
                input: input.sub(offset, len).into(),
                output: mine.into(),
            },
            lv.local,
        );
        // 2. The owners of the shard, one per host, all_reduce it in place.
        if owner_here == rank {
            let owners: Vec<Rank> = (0..nhosts).map(|h| owner(h, j)).collect();
            embed(
                &mut out,
                &sub_layout(Collective::AllReduce, nhosts, len, 0, true),
                me_host,
                &Phase {
                    group: &owners,
                    channel: j,
                    step: local_steps,
                    input: mine.into(),
                    output: mine.into(),
                },
                lv.global,
            );
        }
        // 3. The owner broadcasts it on this host.
        embed(
            &mut out,
            &sub_layout(Collective::Broadcast, local.len(), len, root_local, true),
            me_local,
            &Phase {
                group: local,
                channel: j,
                step: local_steps + global_steps,
                input: mine.into(),
                output: mine.into(),
            },
            lv.local,
        );
    }
    out
}

/// The rank of host `h` that serves column `c` (see the module's all_gather): its local
/// rank `c`, or on a host of fewer ranks, local rank `c mod L`.
fn server(hosts: &HostMap, h: usize, c: usize) -> Rank {
    let m = hosts.members(h);
    m[c % m.len()]
}

/// Column `c`: the local rank `c` of every host that has one, in host order, and their
/// blocks of `count` elements in one of this call's buffers (`at(offset, len)`).
fn column(
    hosts: &HostMap,
    c: usize,
    count: usize,
    at: fn(usize, usize) -> Slice,
) -> (Vec<Rank>, Vec<Slice>) {
    (0..hosts.nhosts())
        .filter_map(|g| hosts.members(g).get(c).copied())
        .map(|r| (r, at(r.index() * count, count)))
        .unzip()
}

/// The hosts without a local rank `c`, each with the rank of the column's that feeds it
/// (all_gather) or that it feeds (reduce_scatter), and the step after `base` where their
/// exchange of the column's `m` blocks starts: round robin over the column's ranks.
fn feeds(hosts: &HostMap, c: usize, owners: &[Rank], base: usize) -> Vec<(Rank, Rank, usize)> {
    let m = owners.len();
    (0..hosts.nhosts())
        .filter(|&g| hosts.members(g).len() <= c)
        .enumerate()
        .map(|(i, g)| (server(hosts, g, c), owners[i % m], base + (i / m) * m))
        .collect()
}

/// Steps the feeds of column `c` take (`m` blocks each, one exchange per column rank at
/// a time).
fn feed_steps(hosts: &HostMap, c: usize, m: usize) -> usize {
    let without = (0..hosts.nhosts())
        .filter(|&g| hosts.members(g).len() <= c)
        .count();
    without.div_ceil(m) * m
}

pub(crate) fn widest(hosts: &HostMap) -> usize {
    (0..hosts.nhosts())
        .map(|h| hosts.members(h).len())
        .max()
        .unwrap_or(1)
}

/// Rank `rank`'s schedule built column by column: `each(out, c, owners, blocks)` with
/// column `c`'s ranks and their blocks in one of the call's buffers (`at`).
fn by_columns(
    layout: &Layout,
    rank: Rank,
    hosts: &HostMap,
    at: fn(usize, usize) -> Slice,
    mut each: impl FnMut(&mut Schedule, usize, &[Rank], &[Slice]),
) -> Schedule {
    let mut out = Schedule::new(*layout, rank);
    if layout.count > 0 {
        for c in 0..widest(hosts) {
            let (owners, blocks) = column(hosts, c, layout.count, at);
            each(&mut out, c, &owners, &blocks);
        }
    }
    out
}

fn all_gather(layout: &Layout, rank: Rank, hosts: &HostMap, lv: LevelAlgorithms) -> Schedule {
    let count = layout.count;
    let h = hosts.host_of(rank);
    let local = hosts.members(h);
    by_columns(
        layout,
        rank,
        hosts,
        Slice::output,
        |out, c, owners, blocks| {
            let m = owners.len();
            // 1. The column's ranks, one per host that has it, all_gather across hosts.
            let global = sub_layout(Collective::AllGather, m, count, 0, layout.in_place);
            let global_steps = steps_of(&global, lv.global);
            if let Some(k) = owners.iter().position(|&r| r == rank) {
                embed(
                    out,
                    &global,
                    k,
                    &Phase {
                        group: owners,
                        channel: c,
                        step: 0,
                        input: Slice::input(0, count).into(),
                        output: Place::Blocks {
                            block: count,
                            at: blocks,
                        },
                    },
                    lv.global,
                );
            }
            // 2. Hosts without the column get its blocks from a rank that has them.
            for (taker, giver, base) in feeds(hosts, c, owners, global_steps) {
                for (k, &b) in blocks.iter().enumerate() {
                    if rank == giver {
                        out.push_on(
                            c,
                            base + k,
                            Primitive::Send {
                                to: vec![taker],
                                src: b,
                            },
                        );
                    } else if rank == taker {
                        out.push_on(
                            c,
                            base + k,
                            Primitive::Recv {
                                from: giver,
                                dst: b,
                            },
                        );
                    }
                }
            }
            // 3. The column's server on each host broadcasts them inside it, block by block.
            if local.len() > 1 {
                let start = global_steps + feed_steps(hosts, c, m);
                let inside = sub_layout(
                    Collective::Broadcast,
                    local.len(),
                    count,
                    hosts.local_rank(server(hosts, h, c)),
                    true,
                );
                let each = steps_of(&inside, lv.local);
                for (k, &b) in blocks.iter().enumerate() {
                    embed(
                        out,
                        &inside,
                        hosts.local_rank(rank),
                        &Phase {
                            group: local,
                            channel: c,
                            step: start + k * each,
                            input: b.into(),
                            output: b.into(),
                        },
                        lv.local,
                    );
                }
            }
        },
    )
}

fn reduce_scatter(layout: &Layout, rank: Rank, hosts: &HostMap, lv: LevelAlgorithms) -> Schedule {
    let count = layout.count;
    let h = hosts.host_of(rank);
    let local = hosts.members(h);
    by_columns(
        layout,
        rank,
        hosts,
        Slice::input,
        |out, c, owners, inputs| {
            let m = owners.len();
            // The local reduce of one block inside host `g`: its steps (none on a lone rank).
            let inside = |g: usize| {
                let l = hosts.members(g).len();
                sub_layout(Collective::Reduce, l, count, c % l, false)
            };
            let inside_steps = |g: usize| match hosts.members(g).len() {
                1 => 0,
                _ => m * steps_of(&inside(g), lv.local),
            };
            let local_steps = (0..hosts.nhosts()).map(inside_steps).max().unwrap_or(0);
            // This host's sums of the column's blocks, on its server: scratch, or on a lone
            // rank its own input blocks.
            let me_serving = server(hosts, h, c) == rank;
            let partial = (me_serving && local.len() > 1).then(|| {
                let at = out.scratch_len;
                out.scratch_len += m * count;
                Slice::scratch(at, m * count)
            });
            let part = |k: usize| match partial {
                Some(p) => p.sub(k * count, count),
                None => inputs[k],
            };
            // 1. Inside each host, every block of the column is reduced to its server.
            if local.len() > 1 {
                let sub = inside(h);
                let each = steps_of(&sub, lv.local);
                for (k, &input) in inputs.iter().enumerate() {
                    embed(
                        out,
                        &sub,
                        hosts.local_rank(rank),
                        &Phase {
                            group: local,
                            channel: c,
                            step: k * each,
                            input: input.into(),
                            // Written only on the server (the sub-layout's root).
                            output: part(k).into(),
                        },
                        lv.local,
                    );
                }
            }
            // 2. Hosts without the column add their sums into a rank that has it.
            for (giver, taker, base) in feeds(hosts, c, owners, local_steps) {
                for k in 0..m {
                    if rank == giver {
                        out.push_on(
                            c,
                            base + k,
                            Primitive::Send {
                                to: vec![taker],
                                src: part(k),
                            },
                        );
                    } else if rank == taker {
                        out.push_on(
                            c,
                            base + k,
                            Primitive::RecvReduceCopy {
                                from: giver,
                                src: part(k),
                                dst: part(k),
                            },
                        );
                    }
                }
            }
            // 3. The column's ranks reduce-scatter across hosts, each keeping its own block.
            if let Some(k) = owners.iter().position(|&r| r == rank) {
                let input = match partial {
                    Some(p) => p.into(),
                    None => Place::Blocks {
                        block: count,
                        at: inputs,
                    },
                };
                embed(
                    out,
                    &sub_layout(Collective::ReduceScatter, m, count, 0, false),
                    k,
                    &Phase {
                        group: owners,
                        channel: c,
                        step: local_steps + feed_steps(hosts, c, m),
                        input,
                        output: Slice::output(0, count).into(),
                    },
                    lv.global,
                );
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcut of `count_steps`: every rank of a ring all_reduce has as many steps.
    #[test]
    fn every_rank_of_a_ring_all_reduce_has_the_same_steps() {
        for n in 2..=33 {
            for (count, in_place) in [(0, false), (1, true), (n + 3, false), (5 * n, true)] {
                let sub = sub_layout(Collective::AllReduce, n, count, 0, in_place);
                let steps = |r: usize| {
                    Algorithm::Ring
                        .generate_checked(&sub, Rank::from(r))
                        .channels
                        .iter()
                        .map(|c| c.steps.len())
                        .max()
                        .unwrap_or(0)
                };
                let all: Vec<usize> = (0..n).map(steps).collect();
                assert!(all.iter().all(|&s| s == all[0]), "n={n}: {all:?}");
                assert_eq!(count_steps(&sub, Algorithm::Ring), all[0]);
            }
        }
    }
}
