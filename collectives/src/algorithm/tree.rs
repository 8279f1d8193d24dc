//! `tree`: a binary tree, reduce up then broadcast down.
//!
//! ```text
//!              0                virtual rank v (v = rank - root mod p):
//!            /   \              parent (v-1)/2, children 2v+1 and 2v+2
//!           1     2
//!          / \   / \
//!         3   4 5   6
//! ```
//!
//! Steps and bytes: all_reduce takes 2 ceil(log2(p+1)) - 2 rounds; an interior rank
//! receives up to 2D and sends D per round (D per round is the most any rank sends).
//! Total 2D(p-1). Cost (unpipelined): `2 log2 p (alpha + 2 D beta)`; the engine streams
//! segments through the levels, so in practice the bandwidth term approaches `2 D beta` on
//! the busiest link. It wins for small and medium vectors on many ranks: log p latency.

use rcoll_transport::Rank;

use super::trees::{compose, memo, Tree};
use crate::schedule::{Layout, Schedule};

/// The binary tree rooted at `root`.
pub fn binary(n: usize, root: Rank) -> Tree {
    Tree::rooted_at(n, root, |v| (v != 0).then(|| (v - 1) / 2))
}

/// Rank `rank`'s schedule.
pub fn schedule(layout: &Layout, rank: Rank) -> Schedule {
    let root = if layout.collective.is_rooted() {
        layout.root
    } else {
        Rank(0)
    };
    let t = memo(("binary", layout.nranks, root), || {
        binary(layout.nranks, root)
    });
    compose(layout, rank, &t, &t)
}
