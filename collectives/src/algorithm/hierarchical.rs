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
//!   1. local reduce of shard j to its owner         (ring among the host's ranks)
//!   2. all_reduce of shard j among the owners of j   (ring across hosts, one rank each)
//!   3. local broadcast of shard j from its owner     (ring among the host's ranks)
//! ```
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

/// The flat algorithm of each level (single-channel, so that a phase's primitives can
/// share one channel with the phases around it).
const LEVEL: Algorithm = Algorithm::Ring;

/// Whether the hierarchical algorithm serves `collective`.
pub fn serves(collective: Collective) -> bool {
    matches!(
        collective,
        Collective::AllReduce | Collective::Broadcast | Collective::Reduce
    )
}

/// Whether `hosts` has two levels: more than one host, and a host with more than one rank.
pub fn has_levels(hosts: &HostMap) -> bool {
    hosts.nhosts() > 1 && hosts.nhosts() < hosts.nranks()
}

/// Rank `rank`'s hierarchical schedule for `layout` over `hosts` (the flat ring when
/// there is only one level).
pub fn schedule(layout: &Layout, rank: Rank, hosts: Option<&HostMap>) -> Schedule {
    let hosts = match hosts {
        Some(h) if h.nranks() == layout.nranks && has_levels(h) => h,
        _ => return super::ring::schedule(layout, rank, hosts),
    };
    match layout.collective {
        Collective::AllReduce => all_reduce(layout, rank, hosts),
        Collective::Broadcast => broadcast(layout, rank, hosts),
        Collective::Reduce => reduce(layout, rank, hosts),
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
    input: Slice,
    output: Slice,
}

/// Embeds virtual rank `me`'s schedule of `sub` (by [`LEVEL`]) into `out` as `phase`.
fn embed(out: &mut Schedule, sub: &Layout, me: usize, phase: &Phase<'_>) {
    let s = LEVEL.generate_checked(sub, Rank::from(me));
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
    static STEPS: std::cell::RefCell<super::recent::Recent<Layout, usize>> =
        const { std::cell::RefCell::new(super::recent::Recent::new(64)) };
}

/// Steps the sub-layout takes: the most any of its virtual ranks uses.
fn steps_of(sub: &Layout) -> usize {
    super::recent::recall(&STEPS, *sub, || count_steps(sub))
}

fn count_steps(sub: &Layout) -> usize {
    // A ring all_reduce gives every rank the same steps (0 to 2(p-1), tested below):
    // rank 0's count is everyone's, without generating p schedules of p steps.
    let ranks = if sub.collective == Collective::AllReduce && LEVEL == Algorithm::Ring {
        1
    } else {
        sub.nranks
    };
    (0..ranks)
        .map(|v| {
            LEVEL
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

fn sub_layout(
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

fn all_reduce(layout: &Layout, rank: Rank, hosts: &HostMap) -> Schedule {
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
                steps_of(&sub_layout(
                    Collective::Reduce,
                    l,
                    biggest,
                    root,
                    layout.in_place,
                ))
            })
        })
        .max()
        .unwrap_or(0);
    let global_steps = steps_of(&sub_layout(Collective::AllReduce, nhosts, biggest, 0, true));
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
                input: input.sub(offset, len),
                output: mine,
            },
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
                    input: mine,
                    output: mine,
                },
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
                input: mine,
                output: mine,
            },
        );
    }
    out
}

/// Each host's leader: the root on the root's host, local rank 0 elsewhere.
fn leaders(hosts: &HostMap, root: Rank) -> Vec<Rank> {
    (0..hosts.nhosts())
        .map(|h| {
            if h == hosts.host_of(root) {
                root
            } else {
                hosts.members(h)[0]
            }
        })
        .collect()
}

/// What broadcast and reduce start from: this rank's empty schedule, its host, and every
/// host's leader; `None` when there is nothing to move.
fn leader_tree(
    layout: &Layout,
    rank: Rank,
    hosts: &HostMap,
) -> Option<(Schedule, usize, Vec<Rank>)> {
    (layout.count > 0).then(|| {
        (
            Schedule::new(*layout, rank),
            hosts.host_of(rank),
            leaders(hosts, layout.root),
        )
    })
}

fn broadcast(layout: &Layout, rank: Rank, hosts: &HostMap) -> Schedule {
    let Some((mut out, h, leads)) = leader_tree(layout, rank, hosts) else {
        return Schedule::new(*layout, rank);
    };
    let c = layout.count;
    let local = hosts.members(h);
    let output = Slice::output(0, c);
    // Only the root reads the input: elsewhere it is empty, and nothing maps to it.
    let input = if rank == layout.root {
        Slice::input(0, c)
    } else {
        output
    };
    let global = sub_layout(
        Collective::Broadcast,
        hosts.nhosts(),
        c,
        hosts.host_of(layout.root),
        layout.in_place,
    );
    let global_steps = steps_of(&global);
    if leads[h] == rank {
        embed(
            &mut out,
            &global,
            h,
            &Phase {
                group: &leads,
                channel: 0,
                step: 0,
                input,
                output,
            },
        );
    }
    let leader_local = hosts.local_rank(leads[h]);
    embed(
        &mut out,
        &sub_layout(Collective::Broadcast, local.len(), c, leader_local, true),
        hosts.local_rank(rank),
        &Phase {
            group: local,
            channel: 0,
            step: global_steps,
            // The leader sends what it holds in its output by now.
            input: output,
            output,
        },
    );
    out
}

fn reduce(layout: &Layout, rank: Rank, hosts: &HostMap) -> Schedule {
    let Some((mut out, h, leads)) = leader_tree(layout, rank, hosts) else {
        return Schedule::new(*layout, rank);
    };
    let c = layout.count;
    let local = hosts.members(h);
    let leader_local = hosts.local_rank(leads[h]);
    let input = Slice::input(0, c);
    // Where this host's sum goes on its leader: the output on the root, scratch on the
    // others (a reduce leaves their buffers as they were). Placed first in scratch.
    let partial = if rank == layout.root {
        Slice::output(0, c)
    } else {
        Slice::scratch(0, c)
    };
    if leads[h] == rank && rank != layout.root {
        out.scratch_len = c;
    }
    let local_steps = (0..hosts.nhosts())
        .map(|x| {
            let m = hosts.members(x);
            steps_of(&sub_layout(
                Collective::Reduce,
                m.len(),
                c,
                hosts.local_rank(leads[x]),
                false,
            ))
        })
        .max()
        .unwrap_or(0);
    embed(
        &mut out,
        &sub_layout(Collective::Reduce, local.len(), c, leader_local, false),
        hosts.local_rank(rank),
        &Phase {
            group: local,
            channel: 0,
            step: 0,
            input,
            output: partial,
        },
    );
    if leads[h] == rank {
        embed(
            &mut out,
            &sub_layout(
                Collective::Reduce,
                hosts.nhosts(),
                c,
                hosts.host_of(layout.root),
                true,
            ),
            h,
            &Phase {
                group: &leads,
                channel: 0,
                step: local_steps,
                input: partial,
                output: Slice::output(0, c),
            },
        );
    }
    out
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
                    LEVEL
                        .generate_checked(&sub, Rank::from(r))
                        .channels
                        .iter()
                        .map(|c| c.steps.len())
                        .max()
                        .unwrap_or(0)
                };
                let all: Vec<usize> = (0..n).map(steps).collect();
                assert!(all.iter().all(|&s| s == all[0]), "n={n}: {all:?}");
                assert_eq!(count_steps(&sub), all[0]);
            }
        }
    }
}
