//! `binomial_tree`: the binomial tree of MPI implementations.
//!
//! ```text
//!   virtual rank v's parent is v with its lowest set bit cleared:
//!
//!        0 ─┬─ 4 ── 5          (p = 8)
//!           │   └── 6 ── 7
//!           ├─ 2 ── 3
//!           └─ 1
//! ```
//!
//! Steps and bytes: ceil(log2 p) rounds per phase. Going down (broadcast) the root sends D
//! in each round, to a different child; going up, the root receives D per round.
//! all_reduce: 2 ceil(log2 p) rounds, 2D(p-1) bytes. Cost:
//! `2 ceil(log2 p) (alpha + D beta)`. Gather and scatter move each rank's block once per
//! level: the root receives (p-1)·block, the textbook optimum. It wins for latency-bound
//! sizes and for rooted collectives.

use rcoll_transport::Rank;

use super::trees::{compose, memo, Tree};
use crate::schedule::{Layout, Schedule};

/// The binomial tree rooted at `root`; each rank lists its largest subtree first.
pub fn binomial(n: usize, root: Rank) -> Tree {
    let virt = move |r: Rank| (r.index() + n - root.index()) % n;
    Tree::rooted_at(n, root, |v| (v != 0).then(|| v & (v - 1)))
        .sort_children_by_key(move |c| std::cmp::Reverse(virt(c)))
}

/// Rank `rank`'s schedule.
pub fn schedule(layout: &Layout, rank: Rank) -> Schedule {
    let root = if layout.collective.is_rooted() {
        layout.root
    } else {
        Rank(0)
    };
    let t = memo(("binomial", layout.nranks, root), || {
        binomial(layout.nranks, root)
    });
    compose(layout, rank, &t, &t)
}
