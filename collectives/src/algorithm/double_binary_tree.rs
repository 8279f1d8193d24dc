//! `double_binary_tree`: NCCL's two complementary binary trees, each carrying half the data.
//!
//! ```text
//!   tree A (p = 8, in-order: interior ranks even)   tree B (mirror: rank r at position 7-r)
//!
//!   0 ─────────── 4                                  7 ─────────── 3
//!           ┌─────┴─────┐                                   ┌──────┴──────┐
//!           2           6                                   5             1
//!         ┌─┴─┐       ┌─┴─┐                               ┌─┴─┐         ┌─┴─┐
//!         1   3       5   7                               6   4         2   0
//! ```
//!
//! Tree A is built on positions: position x's lowest set bit b; its parent is
//! `(x ^ b) | (b << 1)` if that exists, else `x ^ b`; its children `x - b/2` and `x + b/2`
//! (the latter shrunk until it exists); position 0 is the root with the single child
//! `2^floor(log2(p-1))`. Tree B uses the same construction on positions mirrored
//! (`p-1-r`) when p is even and shifted (`r-1`) when p is odd, so that leaves of one tree
//! are interior in the other: each rank is interior in at most one tree (for odd p, rank 0
//! is the exception: the root of tree A and interior in tree B).
//!
//! all_reduce: the first half of the vector is reduced up tree A and broadcast down it,
//! the second half the same way over tree B, concurrently. Rounds: 2 (ceil(log2 p) + 1);
//! each rank sends at most D/2 per round in each tree, and because it is interior in only
//! one tree, it sends about D in total per phase — half of a single tree's load on its
//! busiest link. Cost (unpipelined): `2 log2 p (alpha + D beta)`; with pipelining the
//! bandwidth term approaches a ring's while latency stays logarithmic, which is why NCCL
//! uses it for mid-size all_reduce at scale.
//!
//! reduce / broadcast with a root R: tree A is rooted at R (positions relative to R); tree
//! B's root sends its half to R after the reduction (or receives it from R before the
//! broadcast), one extra round of D/2.

use rcoll_transport::Rank;

use super::partition;
use super::trees::{broadcast_down, memo, reduce_up, Tree};
use crate::schedule::{Collective, Extent, Layout, Primitive, Schedule, Slice};

/// Parent of position `x` in NCCL's in-order binary tree over `n` positions.
fn btree_parent(n: usize, x: usize) -> Option<usize> {
    if x == 0 {
        return None;
    }
    let bit = 1 << x.trailing_zeros();
    let up = (x ^ bit) | (bit << 1);
    Some(if up >= n { x ^ bit } else { up })
}

/// The two trees, relabelled so that tree A is rooted at `root`.
pub fn trees(n: usize, root: Rank) -> (Tree, Tree) {
    let a = Tree::rooted_at(n, root, |x| btree_parent(n, x));
    let to_position = |v: usize| {
        if n % 2 == 0 {
            n - 1 - v
        } else {
            (v + n - 1) % n
        }
    };
    let from_position = |x: usize| if n % 2 == 0 { n - 1 - x } else { (x + 1) % n };
    let b = Tree::rooted_at(n, root, |v| {
        btree_parent(n, to_position(v)).map(from_position)
    });
    (a, b)
}

/// Rank `rank`'s schedule.
pub fn schedule(layout: &Layout, rank: Rank) -> Schedule {
    let (n, c) = (layout.nranks, layout.count);
    let root = if layout.collective.is_rooted() {
        layout.root
    } else {
        Rank(0)
    };
    let a = memo(("double_binary_a", n, root), || trees(n, root).0);
    let b = memo(("double_binary_b", n, root), || trees(n, root).1);
    let halves = partition(c, 2);
    let half = |e: Extent| {
        (
            Slice::input(e.offset, e.len),
            Slice::output(e.offset, e.len),
        )
    };
    let (in_a, out_a) = half(halves[0]);
    let (in_b, out_b) = half(halves[1]);
    let acc_a = Slice::scratch(0, halves[0].len);
    let acc_b = Slice::scratch(halves[0].len, halves[1].len);
    let b_root = b.root();
    // One channel per tree: they share peers, so each numbers its messages on its own.
    let mut sa = Schedule::new(*layout, rank);
    let mut sb = Schedule::new(*layout, rank);
    match layout.collective {
        Collective::AllReduce | Collective::Barrier => {
            let used_a = reduce_up(&mut sa, &a, 0, in_a, out_a, acc_a);
            let used_b = reduce_up(&mut sb, &b, 0, in_b, out_b, acc_b);
            broadcast_down(&mut sa, &a, used_a, out_a, out_a);
            broadcast_down(&mut sb, &b, used_b, out_b, out_b);
        }
        Collective::Reduce => {
            reduce_up(&mut sa, &a, 0, in_a, out_a, acc_a);
            // Tree B's root keeps its half in scratch (it has no output) and hands it over.
            let parked = Slice::scratch(c, halves[1].len);
            let b_dst = if b_root == root { out_b } else { parked };
            let used = reduce_up(&mut sb, &b, 0, in_b, b_dst, acc_b);
            if b_root != root {
                if rank == b_root {
                    sb.push(
                        used,
                        Primitive::Send {
                            to: vec![root],
                            src: parked,
                        },
                    );
                } else if rank == root {
                    sb.push(
                        used,
                        Primitive::Recv {
                            from: b_root,
                            dst: out_b,
                        },
                    );
                }
            }
        }
        Collective::Broadcast => {
            if rank == root && !layout.in_place {
                sa.push(
                    0,
                    Primitive::Copy {
                        src: in_a,
                        dst: out_a,
                    },
                );
                sb.push(
                    0,
                    Primitive::Copy {
                        src: in_b,
                        dst: out_b,
                    },
                );
            }
            broadcast_down(&mut sa, &a, 0, in_a, out_a);
            let mut b_src = in_b;
            let mut b_step0 = 0;
            if b_root != root {
                b_step0 = 1;
                b_src = out_b;
                if rank == root {
                    sb.push(
                        0,
                        Primitive::Send {
                            to: vec![b_root],
                            src: in_b,
                        },
                    );
                } else if rank == b_root {
                    sb.push(
                        0,
                        Primitive::Recv {
                            from: root,
                            dst: out_b,
                        },
                    );
                }
            }
            broadcast_down(&mut sb, &b, b_step0, b_src, out_b);
        }
        _ => {}
    }
    Schedule::merge_channels(vec![sa, sb]).unwrap_or_else(|| Schedule::new(*layout, rank))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_a_matches_the_documented_shape_for_14_ranks() {
        let (a, _) = trees(14, Rank(0));
        assert_eq!(a.children(Rank(0)), [Rank(8)]);
        assert_eq!(a.children(Rank(8)), [Rank(4), Rank(12)]);
        assert_eq!(a.children(Rank(12)), [Rank(10), Rank(13)]);
        assert_eq!(a.parent(Rank(13)), Some(Rank(12)));
        assert_eq!(a.max_height(), 4);
    }

    #[test]
    fn each_rank_is_interior_in_at_most_one_tree() {
        for n in 2..=64 {
            let (a, b) = trees(n, Rank(0));
            for r in 0..n {
                let r = Rank::from(r);
                let both = a.is_interior(r) && b.is_interior(r);
                let allowed = n % 2 == 1 && r == Rank(0);
                assert!(
                    !both || allowed,
                    "rank {} interior in both trees for n={n}",
                    r.0
                );
            }
        }
    }
}
