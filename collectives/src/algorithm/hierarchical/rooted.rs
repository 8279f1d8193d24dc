//! Broadcast and reduce over hosts: a tree of host leaders over one level inside each
//! host (see the parent module).

use rcoll_transport::hosts::HostMap;
use rcoll_transport::Rank;

use super::{embed, steps_of, sub_layout, LevelAlgorithms, Phase};
use crate::schedule::{Collective, Layout, Schedule, Slice};

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

pub(super) fn broadcast(
    layout: &Layout,
    rank: Rank,
    hosts: &HostMap,
    lv: LevelAlgorithms,
) -> Schedule {
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
    let global_steps = steps_of(&global, lv.global);
    if leads[h] == rank {
        embed(
            &mut out,
            &global,
            h,
            &Phase {
                group: &leads,
                channel: 0,
                step: 0,
                input: input.into(),
                output: output.into(),
            },
            lv.global,
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
            input: output.into(),
            output: output.into(),
        },
        lv.local,
    );
    out
}

pub(super) fn reduce(
    layout: &Layout,
    rank: Rank,
    hosts: &HostMap,
    lv: LevelAlgorithms,
) -> Schedule {
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
    // In place, the root's host reduces in place: the root's sum lands in the buffer
    // that holds its own contribution (elsewhere it goes to scratch).
    let in_place_on = |x: usize| layout.in_place && x == hosts.host_of(layout.root);
    // There every rank's one buffer is its sub-layout's: the root's output, the others'
    // input.
    let (sub_input, sub_output) = match in_place_on(h) {
        true if rank == layout.root => (partial, partial),
        true => (input, input),
        false => (input, partial),
    };
    let local_steps = (0..hosts.nhosts())
        .map(|x| {
            let m = hosts.members(x);
            steps_of(
                &sub_layout(
                    Collective::Reduce,
                    m.len(),
                    c,
                    hosts.local_rank(leads[x]),
                    in_place_on(x),
                ),
                lv.local,
            )
        })
        .max()
        .unwrap_or(0);
    embed(
        &mut out,
        &sub_layout(
            Collective::Reduce,
            local.len(),
            c,
            leader_local,
            in_place_on(h),
        ),
        hosts.local_rank(rank),
        &Phase {
            group: local,
            channel: 0,
            step: 0,
            input: sub_input.into(),
            output: sub_output.into(),
        },
        lv.local,
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
                input: partial.into(),
                output: Slice::output(0, c).into(),
            },
            lv.global,
        );
    }
    out
}
