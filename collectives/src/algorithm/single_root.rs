//! `single_root`: every rank talks only to one root (the collective's root, or rank 0).
//!
//! ```text
//!         1   2
//!          \ /
//!      4 -- 0 -- 3        all_reduce: step 0 everyone sends its vector to 0,
//!                                     step 1 rank 0 sends the sum to everyone
//! ```
//!
//! Steps and bytes (p ranks, D bytes per vector): all_reduce takes 2 rounds; the root
//! receives (p-1)D in the first and sends (p-1)D in the second; 2D(p-1) bytes in total.
//! Cost: `2 alpha + 2 (p-1) D beta + (p-1) D gamma`. It wins only for tiny vectors on few
//! ranks, where two rounds beat everything else's latency; the root's link is the
//! bottleneck for anything larger. All collectives are phases over the star
//! ([`super::trees::compose`]); all_to_all goes through the root: every rank sends the
//! root all its blocks, the root sends each rank the blocks addressed to it.

use rcoll_transport::Rank;

use super::trees::{compose, Tree};
use crate::schedule::{Collective, Layout, Primitive, Schedule, Slice};

/// The star rooted at `root`.
pub fn star(n: usize, root: Rank) -> Tree {
    Tree::rooted_at(n, root, |v| (v != 0).then_some(0))
}

/// Rank `rank`'s schedule.
pub fn schedule(layout: &Layout, rank: Rank) -> Schedule {
    let root = if layout.collective.is_rooted() {
        layout.root
    } else {
        Rank(0)
    };
    if layout.collective == Collective::AllToAll {
        return all_to_all(layout, rank, root);
    }
    let tree = star(layout.nranks, root);
    compose(layout, rank, &tree, &tree)
}

/// all_to_all through `root` (out of place; in place goes through scratch first).
fn all_to_all(layout: &Layout, rank: Rank, root: Rank) -> Schedule {
    let (n, c) = (layout.nranks, layout.count);
    let mut s = Schedule::new(*layout, rank);
    let me = rank.index();
    let block = |i: usize| i * c;
    s.push(
        0,
        Primitive::Copy {
            src: Slice::input(block(me), c),
            dst: Slice::output(block(me), c),
        },
    );
    if rank != root {
        for j in (0..n).filter(|&j| j != me && j != root.index()) {
            s.push(
                0,
                Primitive::Send {
                    to: vec![root],
                    src: Slice::input(block(j), c),
                },
            );
        }
        s.push(
            0,
            Primitive::Send {
                to: vec![root],
                src: Slice::input(block(root.index()), c),
            },
        );
        for i in (0..n).filter(|&i| i != me) {
            s.push(
                1,
                Primitive::Recv {
                    from: root,
                    dst: Slice::output(block(i), c),
                },
            );
        }
        return s;
    }
    // Root: scratch holds block (i -> j) at ((i * n) + j) * c for every sender i != root.
    let relay = |i: usize, j: usize| Slice::scratch((i * n + j) * c, c);
    for i in (0..n).filter(|&i| i != me) {
        for j in (0..n).filter(|&j| j != i && j != me) {
            s.push(
                0,
                Primitive::Recv {
                    from: Rank::from(i),
                    dst: relay(i, j),
                },
            );
        }
        s.push(
            0,
            Primitive::Recv {
                from: Rank::from(i),
                dst: Slice::output(block(i), c),
            },
        );
    }
    for j in (0..n).filter(|&j| j != me) {
        let to = vec![Rank::from(j)];
        for i in (0..n).filter(|&i| i != j) {
            let src = if i == me {
                Slice::input(block(j), c)
            } else {
                relay(i, j)
            };
            s.push(
                1,
                Primitive::Send {
                    to: to.clone(),
                    src,
                },
            );
        }
    }
    s
}
