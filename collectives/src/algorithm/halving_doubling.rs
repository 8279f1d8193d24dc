//! `halving_doubling`: recursive halving (reduce-scatter) and recursive doubling
//! (all-gather); all_reduce is their composition, Rabenseifner's algorithm.
//!
//! ```text
//!   p' = 4 participants, vector in 4 parts        halving: exchange half of what you hold
//!   step 1  0 <-> 2   1 <-> 3   (keep 2 parts)    with the partner at distance p'/2, then
//!   step 2  0 <-> 1   2 <-> 3   (keep 1 part)     p'/4, ...; rank i ends with part i reduced
//!   step 3  0 <-> 1   2 <-> 3   (send 1 part)     doubling: the same exchanges in reverse
//!   step 4  0 <-> 2   1 <-> 3   (send 2 parts)    order, each doubling what it holds
//! ```
//!
//! Non-power-of-two fix-up: with p' the largest power of two not above p and q = p - p',
//! ranks 0..2q pair up: each even rank first hands its whole vector to the odd rank after
//! it (which then stands for both) and idles; at the end the odd rank hands the result back.
//! Participants are renumbered 0..p'; participant i stands for ranks 2i and 2i+1 (i < q)
//! or for rank i+q. For reduce_scatter and all_gather, participant i's part is the blocks of
//! the ranks it stands for, so every part lands where it belongs.
//!
//! Steps and bytes (p a power of two): all_reduce takes 2 log2 p rounds, sending D/2,
//! D/4, ..., D/p and back: 2D(p-1)/p per rank, the bandwidth optimum, with logarithmic
//! latency. Cost: `2 log2 p alpha + 2 (p-1)/p D beta + (p-1)/p D gamma`. The fix-up adds
//! two rounds moving D. It wins at mid and large sizes when p is a power of two;
//! otherwise the fix-up's extra D on 2q ranks costs about as much as a ring.

use rcoll_transport::Rank;

use super::partition_shared;
use crate::schedule::{Collective, Extent, Layout, Primitive, Schedule, Slice};

/// The participant structure of one call (shared with [`super::recursive_doubling`]).
pub(super) struct Group {
    n: usize,
    /// Largest power of two not above `n`.
    p2: usize,
    /// Ranks that fold into a partner: `n - p2`.
    pub(super) extra: usize,
}

impl Group {
    pub(super) fn new(n: usize) -> Group {
        let p2 = if n == 0 {
            1
        } else {
            1 << (usize::BITS - 1 - n.leading_zeros())
        };
        Group {
            n,
            p2,
            extra: n - p2,
        }
    }

    pub(super) fn rounds(&self) -> usize {
        self.p2.trailing_zeros() as usize
    }

    /// The participant id of `r`, or `None` for a rank that folds into `r + 1`.
    pub(super) fn id(&self, r: usize) -> Option<usize> {
        if r < 2 * self.extra {
            (r % 2 == 1).then_some(r / 2)
        } else {
            Some(r - self.extra)
        }
    }

    /// The participant id of this schedule's rank; or, for a rank that folds into the
    /// next one, `None` after scheduling its part: handing `give` over first, and taking
    /// the result into `back` at step `last`.
    pub(super) fn id_or_fold(
        &self,
        s: &mut Schedule,
        give: Slice,
        last: usize,
        back: Slice,
    ) -> Option<usize> {
        let r = s.rank.index();
        let id = self.id(r);
        if id.is_none() {
            let partner = Rank::from(r + 1);
            s.push(
                0,
                Primitive::Send {
                    to: vec![partner],
                    src: give,
                },
            );
            s.push(
                last,
                Primitive::Recv {
                    from: partner,
                    dst: back,
                },
            );
        }
        id
    }

    /// An all_reduce of the layout's vector in the output: ranks that fold hand theirs
    /// over and take the result back at step `last`; their partners reduce it into the
    /// output at step 0, run `body` (schedule, participant id, whether it folded a
    /// partner in: then its partial sum is in the output, else still in the input) and
    /// hand the result back at step `last`.
    pub(super) fn all_reduce_folded(
        &self,
        s: &mut Schedule,
        last: usize,
        body: impl FnOnce(&mut Schedule, usize, bool),
    ) {
        let c = s.layout.count;
        let r = s.rank.index();
        let all = Slice::output(0, c);
        let Some(id) = self.id_or_fold(s, Slice::input(0, c), last, all) else {
            return;
        };
        let folded = r < 2 * self.extra;
        if folded {
            s.push(
                0,
                Primitive::RecvReduceCopy {
                    from: Rank::from(r - 1),
                    src: Slice::input(0, c),
                    dst: all,
                },
            );
        }
        body(s, id, folded);
        if folded {
            s.push(
                last,
                Primitive::Send {
                    to: vec![Rank::from(r - 1)],
                    src: all,
                },
            );
        }
    }

    /// The rank that acts for participant `i`.
    pub(super) fn rank(&self, i: usize) -> Rank {
        Rank::from(if i < self.extra {
            2 * i + 1
        } else {
            i + self.extra
        })
    }

    /// Participant parts over a vector made of `n` blocks of `c` (reduce_scatter and
    /// all_gather): the blocks of the ranks each participant stands for.
    fn block_parts(&self, c: usize) -> Parts {
        Parts::Blocks {
            c,
            extra: self.extra,
        }
    }
}

/// The participants' parts of the vector, in participant order.
enum Parts {
    /// Cut as listed (all_reduce's partition, shared by the ranks of a layout).
    Listed(std::rc::Rc<Vec<Extent>>),
    /// Blocks of `c`: the first `extra` participants stand for two ranks' blocks each,
    /// the rest for one. In closed form, since a rank's schedule touches only its log p
    /// spans: a list of p parts would make every schedule O(p) to build.
    Blocks { c: usize, extra: usize },
}

impl Parts {
    fn part(&self, i: usize) -> Extent {
        match self {
            Parts::Listed(parts) => parts[i],
            Parts::Blocks { c, extra } if i < *extra => Extent::new(2 * i * c, 2 * c),
            Parts::Blocks { c, extra } => Extent::new((i + extra) * c, *c),
        }
    }

    /// The span of parts `[lo, hi)`.
    fn span(&self, lo: usize, hi: usize) -> Extent {
        let start = self.part(lo).offset;
        Extent::new(start, self.part(hi - 1).end() - start)
    }
}

/// Rank `rank`'s schedule.
pub fn schedule(layout: &Layout, rank: Rank) -> Schedule {
    let mut s = Schedule::new(*layout, rank);
    let g = Group::new(layout.nranks);
    match layout.collective {
        Collective::AllReduce | Collective::Barrier => all_reduce(&mut s, &g),
        Collective::ReduceScatter => reduce_scatter(&mut s, &g),
        Collective::AllGather => all_gather(&mut s, &g),
        _ => {}
    }
    s
}

/// Where a participant's partial results live: `Input` until it first reduces, then `work`.
#[derive(Clone, Copy)]
struct Working {
    fresh: bool,
    work: fn(usize, usize) -> Slice,
}

impl Working {
    fn at(&self, e: Extent) -> Slice {
        if self.fresh {
            Slice::input(e.offset, e.len)
        } else {
            (self.work)(e.offset, e.len)
        }
    }
}

/// Recursive halving from step 1 over `parts` (participant `id`); returns nothing, leaves
/// part `id` reduced in `w.work`.
fn halve(s: &mut Schedule, g: &Group, id: usize, parts: &Parts, mut w: Working) {
    let (mut lo, mut hi) = (0, g.p2);
    for k in 0..g.rounds() {
        let mask = g.p2 >> (k + 1);
        let partner = g.rank(id ^ mask);
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if id & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let (keep_e, give_e) = (parts.span(keep.0, keep.1), parts.span(give.0, give.1));
        s.push(
            1 + k,
            Primitive::Send {
                to: vec![partner],
                src: w.at(give_e),
            },
        );
        let dst = (w.work)(keep_e.offset, keep_e.len);
        s.push(
            1 + k,
            Primitive::RecvReduceCopy {
                from: partner,
                src: w.at(keep_e),
                dst,
            },
        );
        w.fresh = false;
        (lo, hi) = keep;
    }
}

/// Recursive doubling from `step0` in the output, starting from part `id`.
fn double(s: &mut Schedule, g: &Group, id: usize, parts: &Parts, step0: usize) {
    let (mut lo, mut hi) = (id, id + 1);
    for k in 0..g.rounds() {
        let mask = 1 << k;
        let partner = g.rank(id ^ mask);
        let width = hi - lo;
        let theirs = if id & mask == 0 {
            (hi, hi + width)
        } else {
            (lo - width, lo)
        };
        let (mine_e, theirs_e) = (parts.span(lo, hi), parts.span(theirs.0, theirs.1));
        s.push(
            step0 + k,
            Primitive::Send {
                to: vec![partner],
                src: Slice::output(mine_e.offset, mine_e.len),
            },
        );
        s.push(
            step0 + k,
            Primitive::Recv {
                from: partner,
                dst: Slice::output(theirs_e.offset, theirs_e.len),
            },
        );
        (lo, hi) = (lo.min(theirs.0), hi.max(theirs.1));
    }
}

fn all_reduce(s: &mut Schedule, g: &Group) {
    let m = g.rounds();
    g.all_reduce_folded(s, 2 * m + 1, |s, id, folded| {
        let parts = Parts::Listed(partition_shared(s.layout.count, g.p2));
        halve(
            s,
            g,
            id,
            &parts,
            Working {
                fresh: !folded,
                work: Slice::output,
            },
        );
        double(s, g, id, &parts, m + 1);
    });
}

fn reduce_scatter(s: &mut Schedule, g: &Group) {
    let (n, c) = (g.n, s.layout.count);
    let r = s.rank.index();
    let m = g.rounds();
    let out = Slice::output(0, c);
    let Some(id) = g.id_or_fold(s, Slice::input(0, n * c), m + 1, out) else {
        return;
    };
    let folded = r < 2 * g.extra;
    if folded {
        let dst = Slice::scratch(0, n * c);
        s.push(
            0,
            Primitive::RecvReduceCopy {
                from: Rank::from(r - 1),
                src: Slice::input(0, n * c),
                dst,
            },
        );
    }
    let parts = g.block_parts(c);
    halve(
        s,
        g,
        id,
        &parts,
        Working {
            fresh: !folded,
            work: Slice::scratch,
        },
    );
    s.push(
        m + 1,
        Primitive::Copy {
            src: Slice::scratch(r * c, c),
            dst: out,
        },
    );
    if folded {
        s.push(
            m + 1,
            Primitive::Send {
                to: vec![Rank::from(r - 1)],
                src: Slice::scratch((r - 1) * c, c),
            },
        );
    }
}

fn all_gather(s: &mut Schedule, g: &Group) {
    let (n, c) = (g.n, s.layout.count);
    let r = s.rank.index();
    let m = g.rounds();
    let all = Slice::output(0, n * c);
    let Some(id) = g.id_or_fold(s, Slice::input(0, c), m + 1, all) else {
        return;
    };
    let folded = r < 2 * g.extra;
    if folded {
        s.push(
            0,
            Primitive::Recv {
                from: Rank::from(r - 1),
                dst: Slice::output((r - 1) * c, c),
            },
        );
    }
    if !s.layout.in_place {
        s.push(
            0,
            Primitive::Copy {
                src: Slice::input(0, c),
                dst: Slice::output(r * c, c),
            },
        );
    }
    double(s, g, id, &g.block_parts(c), 1);
    if folded {
        s.push(
            m + 1,
            Primitive::Send {
                to: vec![Rank::from(r - 1)],
                src: all,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn participants_cover_every_rank_once() {
        for n in 1..=33 {
            let g = Group::new(n);
            assert!(g.p2 <= n && n < 2 * g.p2);
            let mut covered = vec![0; n];
            for i in 0..g.p2 {
                let r = g.rank(i).index();
                assert_eq!(g.id(r), Some(i));
                covered[r] += 1;
                if i < g.extra {
                    covered[r - 1] += 1;
                }
            }
            assert!(covered.iter().all(|&k| k == 1), "n={n}");
        }
    }
}
