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

use rcoll_transport::hosts::HostMap;
use rcoll_transport::Rank;

use super::{partition, ring_peer};
use crate::schedule::{Collective, Layout, Primitive, Schedule, Slice};

/// The order ranks stand in on the ring: the host map's (host by host, so that the ring
/// crosses each level of the network the fewest times), or rank order without one. Blocks
/// stay where their rank's are in the buffers; only who passes to whom changes.
struct Ring<'a> {
    hosts: Option<&'a HostMap>,
    n: usize,
}

impl Ring<'_> {
    /// The rank `delta` places after `r`.
    fn peer(&self, r: Rank, delta: isize) -> Rank {
        match self.hosts {
            Some(h) => h.ring_peer(r, delta),
            None => ring_peer(r, delta, self.n),
        }
    }

    /// `r`'s position on the ring.
    fn pos(&self, r: Rank) -> usize {
        match self.hosts {
            Some(h) => h
                .ring_order()
                .iter()
                .position(|&x| x == r)
                .unwrap_or(r.index()),
            None => r.index(),
        }
    }

    /// The rank at position `i`.
    fn at(&self, i: usize) -> Rank {
        match self.hosts {
            Some(h) => h.ring_order()[i % self.n],
            None => Rank::from(i % self.n),
        }
    }
}

/// Rank `rank`'s schedule, on the ring order of `hosts` (rank order without).
pub fn schedule(layout: &Layout, rank: Rank, hosts: Option<&HostMap>) -> Schedule {
    let mut s = Schedule::new(*layout, rank);
    let ring = Ring {
        hosts: hosts.filter(|h| h.nranks() == layout.nranks && !h.ring_is_rank_order()),
        n: layout.nranks,
    };
    let ring = &ring;
    match layout.collective {
        Collective::AllReduce | Collective::Barrier => all_reduce(&mut s, ring),
        Collective::ReduceScatter => reduce_scatter(&mut s, ring),
        Collective::AllGather => all_gather(&mut s, ring),
        Collective::Broadcast => broadcast(&mut s, ring),
        Collective::Reduce => reduce(&mut s, ring),
        Collective::Gather => gather(&mut s, ring),
        Collective::Scatter => scatter(&mut s, ring),
        Collective::AllToAll => all_to_all(&mut s, ring),
        Collective::SendRecv => {}
    }
    s
}

fn neighbours(s: &Schedule, ring: &Ring) -> (Rank, Rank) {
    (ring.peer(s.rank, -1), ring.peer(s.rank, 1))
}

fn all_reduce(s: &mut Schedule, ring: &Ring) {
    let (n, c, r) = (s.layout.nranks, s.layout.count, s.rank);
    let (left, right) = neighbours(s, ring);
    let chunks = partition(c, n);
    let chunk = |delta: isize| chunks[ring.peer(r, delta).index()];
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

fn reduce_scatter(s: &mut Schedule, ring: &Ring) {
    let (n, c, r) = (s.layout.nranks, s.layout.count, s.rank);
    let (left, right) = neighbours(s, ring);
    // Rank r starts with block r-1 so that block r completes at rank r.
    let block = |delta: isize| Slice::input(ring.peer(r, delta).index() * c, c);
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

fn all_gather(s: &mut Schedule, ring: &Ring) {
    let (n, c, r) = (s.layout.nranks, s.layout.count, s.rank);
    let (left, right) = neighbours(s, ring);
    let block = |delta: isize| Slice::output(ring.peer(r, delta).index() * c, c);
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
fn position_towards_root(s: &Schedule, ring: &Ring) -> usize {
    let n = s.layout.nranks;
    (ring.pos(s.rank) + 2 * n - ring.pos(s.layout.root) - 1) % n
}

fn broadcast(s: &mut Schedule, ring: &Ring) {
    let (n, c) = (s.layout.nranks, s.layout.count);
    let (left, right) = neighbours(s, ring);
    let d = (position_towards_root(s, ring) + 1) % n; // distance from the root along the ring
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

fn reduce(s: &mut Schedule, ring: &Ring) {
    let (n, c) = (s.layout.nranks, s.layout.count);
    let (left, right) = neighbours(s, ring);
    let p = position_towards_root(s, ring);
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

fn gather(s: &mut Schedule, ring: &Ring) {
    let (n, c) = (s.layout.nranks, s.layout.count);
    let (left, right) = neighbours(s, ring);
    let p = position_towards_root(s, ring);
    let root_pos = ring.pos(s.layout.root);
    let rank_at = |pos: usize| ring.at(root_pos + 1 + pos).index();
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

fn scatter(s: &mut Schedule, ring: &Ring) {
    let (n, c) = (s.layout.nranks, s.layout.count);
    let (left, right) = neighbours(s, ring);
    let p = position_towards_root(s, ring);
    let root = s.layout.root.index();
    let root_pos = ring.pos(s.layout.root);
    let rank_at = |pos: usize| ring.at(root_pos + 1 + pos).index();
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

fn all_to_all(s: &mut Schedule, ring: &Ring) {
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
        let to = ring.peer(r, step as isize);
        let from = ring.peer(r, -(step as isize));
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
