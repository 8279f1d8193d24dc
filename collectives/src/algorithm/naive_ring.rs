//! `naive_ring`: the whole vector travels around the ring, one hop per step.
//!
//! ```text
//!   reduce:    r+1 -> r+2 -> ... -> r-1 -> r      (r = root; rank 0 when unrooted)
//!   broadcast: r -> r+1 -> ... -> r-1
//!   all_reduce: the reduction travels p-1 hops to the root, the result p-1 more.
//! ```
//!
//! Steps and bytes: all_reduce takes 2(p-1) rounds, each moving D on one link; 2D(p-1) in
//! total. Cost: `2 (p-1) (alpha + D beta)`. Every link is used but only one at a time, so
//! it is the lecture's straw man; the engine's segment pipelining rescues much of the
//! bandwidth, but the latency term grows with p. Gather and scatter run along the same
//! chains.

use rcoll_transport::hosts::HostMap;
use rcoll_transport::Rank;

use super::trees::{compose, memo, Tree};
use crate::schedule::{Layout, Schedule};

/// The chain ending at `root`: rank `root+1` first, each rank passing to the next.
pub fn chain_to(n: usize, root: Rank) -> Tree {
    Tree::rooted_at(n, root, |v| (v != 0).then(|| (v + 1) % n))
}

/// The chain starting at `root`: each rank passing to the next, `root-1` last.
pub fn chain_from(n: usize, root: Rank) -> Tree {
    Tree::rooted_at(n, root, |v| (v != 0).then(|| v - 1))
}

/// Rank `rank`'s schedule: chains in the ring order of `hosts` (host by host), rank order
/// without.
pub fn schedule(layout: &Layout, rank: Rank, hosts: Option<&HostMap>) -> Schedule {
    let root = if layout.collective.is_rooted() {
        layout.root
    } else {
        Rank(0)
    };
    let n = layout.nranks;
    match hosts.filter(|h| h.nranks() == n && !h.ring_is_rank_order()) {
        Some(h) => {
            let order = h.ring_order();
            let to = Tree::rooted_at_order(order, root, |v| (v != 0).then(|| (v + 1) % n));
            let from = Tree::rooted_at_order(order, root, |v| (v != 0).then(|| v - 1));
            compose(layout, rank, &to, &from)
        }
        None => {
            let to = memo(("chain_to", n, root), || chain_to(n, root));
            let from = memo(("chain_from", n, root), || chain_from(n, root));
            compose(layout, rank, &to, &from)
        }
    }
}
