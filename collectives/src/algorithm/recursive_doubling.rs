//! `recursive_doubling`: all_reduce by exchanging the whole vector with a partner at
//! distance 1, 2, 4, ... and reducing, so that every rank holds the sum of a group twice as
//! large after each round: the latency optimum for small vectors (MPICH's and Open MPI's
//! choice for short all_reduces).
//!
//! ```text
//!   p' = 4 participants, the whole vector each round
//!   step 1  0 <-> 1   2 <-> 3     each holds x0+x1 or x2+x3
//!   step 2  0 <-> 2   1 <-> 3     each holds (x0+x1)+(x2+x3)
//! ```
//!
//! Non-power-of-two fix-up, as in [`super::halving_doubling`]: with p' the largest power
//! of two not above p and q = p - p', each even rank of 0..2q first hands its vector to the
//! odd rank after it, which stands for both, and gets the result back at the end.
//!
//! Both partners of a round reduce the same two partial sums, in either order: with the
//! commutative operations this library has, every rank ends with the same bits.
//!
//! Steps and bytes (p a power of two): log2 p rounds, each sending and receiving D: D log2 p
//! per rank. Cost: `log2 p (alpha + 2 o + D beta + D gamma)`. One message each way per rank
//! per round, where `mesh` sends and receives p-1 in its one round (`alpha + 2(p-1) o`):
//! it wins while latency and per-message costs dominate, on more than a few ranks; the
//! fix-up adds two rounds moving D.

use rcoll_transport::Rank;

use super::halving_doubling::Group;
use crate::schedule::{Collective, Layout, Primitive, Schedule, Slice};

/// Rank `rank`'s schedule.
pub fn schedule(layout: &Layout, rank: Rank) -> Schedule {
    let mut s = Schedule::new(*layout, rank);
    if matches!(
        layout.collective,
        Collective::AllReduce | Collective::Barrier
    ) {
        all_reduce(&mut s, &Group::new(layout.nranks));
    }
    s
}

fn all_reduce(s: &mut Schedule, g: &Group) {
    let m = g.rounds();
    g.all_reduce_folded(s, m + 1, |s, id, folded| {
        let all = Slice::output(0, s.layout.count);
        // The partial sum lives in the input until the first reduction, then in the output.
        let mut held = if folded {
            all
        } else {
            Slice::input(0, s.layout.count)
        };
        for k in 0..m {
            let partner = g.rank(id ^ (1 << k));
            s.push(
                1 + k,
                Primitive::Send {
                    to: vec![partner],
                    src: held,
                },
            );
            s.push(
                1 + k,
                Primitive::RecvReduceCopy {
                    from: partner,
                    src: held,
                    dst: all,
                },
            );
            held = all;
        }
    });
}
