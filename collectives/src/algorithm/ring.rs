//! `ring`: the pipelined ring. all_reduce is a reduce-scatter followed by an all-gather;
//! rank i starts with chunk i and every rank sends to its right neighbour only.
//!
//! ```text
//!   0 ──> 1 ──> 2 ──> 3 ──┐      p chunks c0..c3; in step s rank r sends chunk (r - s)
//!   ^                     │      steps 0..p-2:      reduce-scatter (RecvReduceSend)
//!   └─────────────────────┘      step p-1:          chunk r+1 complete (RecvReduceCopySend)
//!                                steps p..2p-3:     all-gather (RecvCopySend), then Recv
//! ```
//!
//! Steps and bytes: all_reduce takes 2(p-1) rounds, each moving D/p per rank; 2D(p-1) bytes
//! in total and 2D(p-1)/p per rank, the bandwidth optimum. Cost:
//! `2 (p-1) alpha + 2 (p-1)/p D beta + (p-1)/p D gamma`. It wins for large vectors; the
//! latency term grows linearly with p. The engine pipelines segments within a step and
//! from one step into the next, as NCCL pipelines slices.
//!
//! The other collectives, all with neighbour-only traffic:
//! - reduce_scatter / all_gather: one half of all_reduce each (p-1 rounds of D/p, where D
//!   is the whole vector);
//! - broadcast / reduce: a chain from (or to) the root, the vector cut into p chunks that
//!   follow each other down the chain: p-1+p-1 rounds of D/p;
//! - gather / scatter: blocks travel the chain towards (from) the root: p-1 rounds, at most
//!   one block per rank per round, the root receiving (sending) (p-1) blocks;
//! - all_to_all: p-1 rounds of pairwise exchange in ring order (round s: send to r+s,
//!   receive from r-s), the classic pairwise algorithm; not neighbour-only.

use rcoll_transport::Rank;

use super::{partition, ring_peer};
use crate::schedule::{Collective, Layout, Primitive, Schedule, Slice};

/// Rank `rank`'s schedule.
pub fn schedule(layout: &Layout, rank: Rank) -> Schedule {
    let mut s = Schedule::new(*layout, rank);
    match layout.collective {
        Collective::AllReduce | Collective::Barrier => all_reduce(&mut s),
        Collective::ReduceScatter => reduce_scatter(&mut s),
        Collective::AllGather => all_gather(&mut s),
        Collective::Broadcast => broadcast(&mut s),
        Collective::Reduce => reduce(&mut s),
        Collective::Gather => gather(&mut s),
        Collective::Scatter => scatter(&mut s),
        Collective::AllToAll => all_to_all(&mut s),
        Collective::SendRecv => {}
    }
    s
}

fn neighbours(s: &Schedule) -> (Rank, Rank) {
    let n = s.layout.nranks;
    (ring_peer(s.rank, -1, n), ring_peer(s.rank, 1, n))
}

fn all_reduce(s: &mut Schedule) {
    let (n, c, r) = (s.layout.nranks, s.layout.count, s.rank);
    let (left, right) = neighbours(s);
    let chunks = partition(c, n);
    let chunk = |delta: isize| chunks[ring_peer(r, delta, n).index()];
    let input = |delta: isize| Slice::input(chunk(delta).offset, chunk(delta).len);
    let output = |delta: isize| Slice::output(chunk(delta).offset, chunk(delta).len);
    s.push(
        0,
        Primitive::Send {
            to: vec![right],
            src: input(0),
        },
    );
    for step in 1..n - 1 {
        let d = -(step as isize);
        s.push(
            step,
            Primitive::RecvReduceSend {
                from: left,
                to: vec![right],
                src: input(d),
            },
        );
    }
    s.push(
        n - 1,
        Primitive::RecvReduceCopySend {
            from: left,
            to: vec![right],
            src: input(1),
            dst: output(1),
        },
    );
    for j in 1..n - 1 {
        // Step n-1+j: the chunk completed j steps ago by rank r-j, i.e. chunk r-j+1.
        s.push(
            n - 1 + j,
            Primitive::RecvCopySend {
                from: left,
                to: vec![right],
                dst: output(1 - j as isize),
            },
        );
    }
    s.push(
        2 * n - 2,
        Primitive::Recv {
            from: left,
            dst: output(2 - n as isize),
        },
    );
}

fn reduce_scatter(s: &mut Schedule) {
    let (n, c, r) = (s.layout.nranks, s.layout.count, s.rank);
    let (left, right) = neighbours(s);
    // Rank r starts with block r-1 so that block r completes at rank r.
    let block = |delta: isize| Slice::input(ring_peer(r, delta, n).index() * c, c);
    s.push(
        0,
        Primitive::Send {
            to: vec![right],
            src: block(-1),
        },
    );
    for step in 1..n - 1 {
        let d = -1 - step as isize;
        s.push(
            step,
            Primitive::RecvReduceSend {
                from: left,
                to: vec![right],
                src: block(d),
            },
        );
    }
    s.push(
        n - 1,
        Primitive::RecvReduceCopy {
            from: left,
            src: block(0),
            dst: Slice::output(0, c),
        },
    );
}

fn all_gather(s: &mut Schedule) {
    let (n, c, r) = (s.layout.nranks, s.layout.count, s.rank);
    let (left, right) = neighbours(s);
    let block = |delta: isize| Slice::output(ring_peer(r, delta, n).index() * c, c);
    s.push(
        0,
        Primitive::Send {
            to: vec![right],
            src: Slice::input(0, c),
        },
    );
    if !s.layout.in_place {
        s.push(
            0,
            Primitive::Copy {
                src: Slice::input(0, c),
                dst: block(0),
            },
        );
    }
    for step in 1..n - 1 {
        s.push(
            step,
            Primitive::RecvCopySend {
                from: left,
                to: vec![right],
                dst: block(-(step as isize)),
            },
        );
    }
    s.push(
        n - 1,
        Primitive::Recv {
            from: left,
            dst: block(1 - n as isize),
        },
    );
}

/// Position of this rank on the chain that starts right after the root and ends at it.
fn position_towards_root(s: &Schedule) -> usize {
    let n = s.layout.nranks;
    (s.rank.index() + 2 * n - s.layout.root.index() - 1) % n
}

fn broadcast(s: &mut Schedule) {
    let (n, c) = (s.layout.nranks, s.layout.count);
    let (left, right) = neighbours(s);
    let d = (position_towards_root(s) + 1) % n; // distance from the root along the ring
    let chunks = partition(c, n);
    if d == 0 && !s.layout.in_place {
        s.push(
            0,
            Primitive::Copy {
                src: Slice::input(0, c),
                dst: Slice::output(0, c),
            },
        );
    }
    for (j, e) in chunks.iter().enumerate() {
        let (src, dst) = (
            Slice::input(e.offset, e.len),
            Slice::output(e.offset, e.len),
        );
        let prim = match d {
            0 => Primitive::Send {
                to: vec![right],
                src,
            },
            d if d == n - 1 => Primitive::Recv { from: left, dst },
            _ => Primitive::RecvCopySend {
                from: left,
                to: vec![right],
                dst,
            },
        };
        s.push(d + j, prim);
    }
}

fn reduce(s: &mut Schedule) {
    let (n, c) = (s.layout.nranks, s.layout.count);
    let (left, right) = neighbours(s);
    let p = position_towards_root(s);
    let chunks = partition(c, n);
    for (j, e) in chunks.iter().enumerate() {
        let (src, dst) = (
            Slice::input(e.offset, e.len),
            Slice::output(e.offset, e.len),
        );
        let prim = match p {
            0 => Primitive::Send {
                to: vec![right],
                src,
            },
            p if p == n - 1 => Primitive::RecvReduceCopy {
                from: left,
                src,
                dst,
            },
            _ => Primitive::RecvReduceSend {
                from: left,
                to: vec![right],
                src,
            },
        };
        s.push(p + j, prim);
    }
}

fn gather(s: &mut Schedule) {
    let (n, c) = (s.layout.nranks, s.layout.count);
    let (left, right) = neighbours(s);
    let p = position_towards_root(s);
    let root = s.layout.root.index();
    let rank_at = |pos: usize| (root + 1 + pos) % n;
    if p == n - 1 {
        if !s.layout.in_place {
            let own = Slice::output(s.rank.index() * c, c);
            s.push(
                0,
                Primitive::Copy {
                    src: Slice::input(0, c),
                    dst: own,
                },
            );
        }
        for step in 0..n - 1 {
            let q = rank_at(n - 2 - step);
            s.push(
                step,
                Primitive::Recv {
                    from: left,
                    dst: Slice::output(q * c, c),
                },
            );
        }
        return;
    }
    s.push(
        0,
        Primitive::Send {
            to: vec![right],
            src: Slice::input(0, c),
        },
    );
    for step in 1..=p {
        let dst = Slice::scratch((step - 1) * c, c);
        s.push(
            step,
            Primitive::RecvCopySend {
                from: left,
                to: vec![right],
                dst,
            },
        );
    }
}

fn scatter(s: &mut Schedule) {
    let (n, c) = (s.layout.nranks, s.layout.count);
    let (left, right) = neighbours(s);
    let p = position_towards_root(s);
    let root = s.layout.root.index();
    let rank_at = |pos: usize| (root + 1 + pos) % n;
    if p == n - 1 {
        if !s.layout.in_place {
            s.push(
                0,
                Primitive::Copy {
                    src: Slice::input(root * c, c),
                    dst: Slice::output(0, c),
                },
            );
        }
        // Farthest block first: block for position t leaves at step n-2-t.
        for t in (0..n - 1).rev() {
            let src = Slice::input(rank_at(t) * c, c);
            s.push(
                n - 2 - t,
                Primitive::Send {
                    to: vec![right],
                    src,
                },
            );
        }
        return;
    }
    for t in (p + 1..n - 1).rev() {
        let dst = Slice::scratch(t * c, c);
        s.push(
            n - 2 - t + p + 1,
            Primitive::RecvCopySend {
                from: left,
                to: vec![right],
                dst,
            },
        );
    }
    s.push(
        n - 1,
        Primitive::Recv {
            from: left,
            dst: Slice::output(0, c),
        },
    );
}

fn all_to_all(s: &mut Schedule) {
    let (n, c, r) = (s.layout.nranks, s.layout.count, s.rank);
    let me = r.index();
    s.push(
        0,
        Primitive::Copy {
            src: Slice::input(me * c, c),
            dst: Slice::output(me * c, c),
        },
    );
    for step in 1..n {
        let to = ring_peer(r, step as isize, n);
        let from = ring_peer(r, -(step as isize), n);
        s.push(
            step,
            Primitive::Send {
                to: vec![to],
                src: Slice::input(to.index() * c, c),
            },
        );
        s.push(
            step,
            Primitive::Recv {
                from,
                dst: Slice::output(from.index() * c, c),
            },
        );
    }
}
