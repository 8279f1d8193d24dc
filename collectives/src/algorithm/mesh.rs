//! `mesh`: every rank sends directly to every rank that needs its data, in one round.
//!
//! ```text
//!      0 ─── 1
//!      │ ╲ ╱ │        all_reduce: each rank sends its whole vector to the p-1 others
//!      │ ╱ ╲ │        and reduces the p vectors it then holds
//!      3 ─── 2
//! ```
//!
//! Steps and bytes: all_reduce is 1 round in which each rank sends (p-1)D; D p (p-1) bytes in
//! total. Cost: `alpha + (p-1) D beta + (p-1) D gamma`. reduce_scatter and all_gather send
//! each rank only its block: 1 round, (p-1)D/p per rank, the bandwidth optimum, at the price
//! of p-1 simultaneous connections per rank. It wins when latency dominates and p is small.
//!
//! Reductions combine the p contributions in rank order (`x0 ⊕ x1 ⊕ ... ⊕ x(p-1)`) on
//! every rank, so floating-point results are bit-identical across ranks.

use rcoll_transport::Rank;

use crate::schedule::{Collective, Layout, Primitive, Schedule, Slice};

/// Rank `rank`'s schedule.
pub fn schedule(layout: &Layout, rank: Rank) -> Schedule {
    let (n, c) = (layout.nranks, layout.count);
    let me = rank.index();
    let root = layout.root;
    let others: Vec<Rank> = (0..n).filter(|&q| q != me).map(Rank::from).collect();
    let copy_own = !layout.in_place;
    let mut s = Schedule::new(*layout, rank);
    match layout.collective {
        Collective::AllReduce | Collective::Barrier | Collective::Reduce => {
            let reduce = layout.collective == Collective::Reduce;
            let to = match (reduce, rank == root) {
                (false, _) => others.clone(),
                (true, false) => vec![root],
                (true, true) => vec![],
            };
            if !to.is_empty() {
                s.push(
                    0,
                    Primitive::Send {
                        to,
                        src: Slice::input(0, c),
                    },
                );
            }
            if !reduce || rank == root {
                let all: Vec<usize> = (0..n).collect();
                accumulate(
                    &mut s,
                    &all,
                    Slice::input(0, c),
                    Slice::output(0, c),
                    layout.in_place,
                );
            }
        }
        Collective::ReduceScatter => {
            for &q in &others {
                s.push(
                    0,
                    Primitive::Send {
                        to: vec![q],
                        src: Slice::input(q.index() * c, c),
                    },
                );
            }
            let all: Vec<usize> = (0..n).collect();
            let own = Slice::input(me * c, c);
            accumulate(&mut s, &all, own, Slice::output(0, c), layout.in_place);
        }
        Collective::Broadcast => {
            if rank == root {
                s.push(
                    0,
                    Primitive::Send {
                        to: others,
                        src: Slice::input(0, c),
                    },
                );
                if copy_own {
                    s.push(
                        0,
                        Primitive::Copy {
                            src: Slice::input(0, c),
                            dst: Slice::output(0, c),
                        },
                    );
                }
            } else {
                s.push(
                    0,
                    Primitive::Recv {
                        from: root,
                        dst: Slice::output(0, c),
                    },
                );
            }
        }
        Collective::AllGather | Collective::Gather => {
            let all_gather = layout.collective == Collective::AllGather;
            let to = match (all_gather, rank == root) {
                (true, _) => others.clone(),
                (false, true) => vec![],
                (false, false) => vec![root],
            };
            if !to.is_empty() {
                s.push(
                    0,
                    Primitive::Send {
                        to,
                        src: Slice::input(0, c),
                    },
                );
            }
            if all_gather || rank == root {
                for &q in &others {
                    s.push(
                        0,
                        Primitive::Recv {
                            from: q,
                            dst: Slice::output(q.index() * c, c),
                        },
                    );
                }
                if copy_own {
                    s.push(
                        0,
                        Primitive::Copy {
                            src: Slice::input(0, c),
                            dst: Slice::output(me * c, c),
                        },
                    );
                }
            }
        }
        Collective::Scatter => {
            if rank == root {
                for &q in &others {
                    s.push(
                        0,
                        Primitive::Send {
                            to: vec![q],
                            src: Slice::input(q.index() * c, c),
                        },
                    );
                }
                if copy_own {
                    s.push(
                        0,
                        Primitive::Copy {
                            src: Slice::input(me * c, c),
                            dst: Slice::output(0, c),
                        },
                    );
                }
            } else {
                s.push(
                    0,
                    Primitive::Recv {
                        from: root,
                        dst: Slice::output(0, c),
                    },
                );
            }
        }
        Collective::AllToAll => {
            for &q in &others {
                s.push(
                    0,
                    Primitive::Send {
                        to: vec![q],
                        src: Slice::input(q.index() * c, c),
                    },
                );
            }
            for &q in &others {
                s.push(
                    0,
                    Primitive::Recv {
                        from: q,
                        dst: Slice::output(q.index() * c, c),
                    },
                );
            }
            s.push(
                0,
                Primitive::Copy {
                    src: Slice::input(me * c, c),
                    dst: Slice::output(me * c, c),
                },
            );
        }
        Collective::SendRecv => {}
    }
    s
}

/// Reduces the contributions of `ranks` (in that order; this rank's is `own`, the others
/// arrive as messages) into `result`, in step 0.
///
/// In place, `own` and `result` may be the same memory. When this rank's contribution is
/// one of the first two combined, it is read before anything is written there (the write
/// waits for the sends reading it too) and the sum is built in `result`; else `own` is
/// needed after the first contributions have arrived, and the sum is built in scratch and
/// copied at the end.
pub fn accumulate(s: &mut Schedule, ranks: &[usize], own: Slice, result: Slice, in_place: bool) {
    let me = s.rank.index();
    let len = own.len;
    let own_first = ranks.iter().take(2).any(|&q| q == me);
    let acc = if in_place && !own_first {
        Slice::scratch(0, len)
    } else {
        result
    };
    let mut started = false;
    let mut pending: Option<usize> = None; // a peer whose message waits for a partner
    for &q in ranks {
        let prim = match (started, pending, q == me) {
            (false, None, true) => {
                pending = Some(me);
                continue;
            }
            (false, None, false) => {
                pending = Some(q);
                continue;
            }
            (false, Some(first), true) => Primitive::RecvReduceCopy {
                from: Rank::from(first),
                src: own,
                dst: acc,
            },
            (false, Some(first), false) if first == me => Primitive::RecvReduceCopy {
                from: Rank::from(q),
                src: own,
                dst: acc,
            },
            (false, Some(first), false) => {
                s.push(
                    0,
                    Primitive::Recv {
                        from: Rank::from(first),
                        dst: acc,
                    },
                );
                Primitive::RecvReduceCopy {
                    from: Rank::from(q),
                    src: acc,
                    dst: acc,
                }
            }
            (true, _, true) => Primitive::Reduce { src: own, dst: acc },
            (true, _, false) => Primitive::RecvReduceCopy {
                from: Rank::from(q),
                src: acc,
                dst: acc,
            },
        };
        started = true;
        s.push(0, prim);
    }
    if acc != result {
        s.push(
            0,
            Primitive::Copy {
                src: acc,
                dst: result,
            },
        );
    }
}
