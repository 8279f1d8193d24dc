//! Facts both the engine and the verifier derive from a schedule, computed in one place so
//! that the verifier checks the plan the engine runs: which message each primitive sends
//! and receives, where each slice lives once in-place aliasing is resolved, and which
//! earlier primitives of its channel each one must wait for. (The verifier applies the
//! dependencies to whole primitives; the engine to segments, per [`Dependency::needs`].)

use rcoll_transport::Rank;

use super::{Buffer, BufferLayout, Primitive, Schedule, Slice};

/// Physical storage a slice resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Store {
    /// The caller's input buffer (out of place).
    Input,
    /// The caller's output buffer (out of place) or the single buffer (in place).
    Output,
    /// Engine scratch.
    Scratch,
}

/// A slice resolved to its storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// Which storage.
    pub store: Store,
    /// First element in that storage.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

impl Location {
    /// Whether the two locations share any element.
    pub fn overlaps(&self, other: &Location) -> bool {
        self.store == other.store
            && self.len > 0
            && other.len > 0
            && self.offset < other.offset + other.len
            && other.offset < self.offset + self.len
    }

    /// Whether one primitive's access here must be ordered after another's there.
    ///
    /// Like [`Location::overlaps`], except that an empty location occupies its offset: a
    /// zero-element primitive still carries a message, and a barrier (all zero-element)
    /// relies on the order of those messages exactly as a reduction relies on its data.
    pub fn touches(&self, other: &Location) -> bool {
        let end = |l: &Location| l.offset + l.len.max(1);
        self.store == other.store && self.offset < end(other) && other.offset < end(self)
    }
}

/// Why a slice cannot be resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfBounds {
    /// The slice.
    pub slice: Slice,
    /// Length of the buffer it names.
    pub buffer_len: usize,
}

/// Resolves `slice` against the rank's buffers, checking bounds.
pub fn resolve(
    slice: Slice,
    buffers: &BufferLayout,
    scratch_len: usize,
) -> Result<Location, OutOfBounds> {
    let extent = match slice.buf {
        Buffer::Input => buffers.input,
        Buffer::Output => buffers.output,
        Buffer::Scratch => super::Extent::new(0, scratch_len),
    };
    if slice.offset + slice.len > extent.len {
        return Err(OutOfBounds {
            slice,
            buffer_len: extent.len,
        });
    }
    let store = match slice.buf {
        Buffer::Scratch => Store::Scratch,
        Buffer::Input if !buffers.in_place => Store::Input,
        Buffer::Input | Buffer::Output => Store::Output,
    };
    Ok(Location {
        store,
        offset: extent.offset + slice.offset,
        len: slice.len,
    })
}

/// An earlier primitive of the same channel that a primitive must wait for, element by
/// element: each pair is (a location of the earlier primitive, a location of this one) that
/// touch, where at least one of the two writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// Index of the earlier primitive in the channel.
    pub op: usize,
    /// The conflicting (earlier, later) location pairs.
    pub pairs: Vec<(Location, Location)>,
}

impl Dependency {
    /// Segments of the earlier primitive that must be done before segment `k` of the later
    /// one may run, with `seg` elements per segment and `earlier_segments` in all.
    ///
    /// Segment k covers elements `[k*seg, (k+1)*seg)` of each of a primitive's locations;
    /// it needs every segment of the earlier primitive that covers an element it touches.
    /// An empty location (a zero-element primitive, as in a barrier) needs all of them.
    pub fn needs(&self, k: usize, seg: usize, earlier_segments: usize) -> usize {
        let seg = seg.max(1);
        let mut need = 0;
        for (before, after) in &self.pairs {
            if before.len == 0 || after.len == 0 {
                return earlier_segments;
            }
            let lo = after.offset + k * seg;
            let hi = (lo + seg).min(after.offset + after.len);
            let (a, b) = (lo.max(before.offset), hi.min(before.offset + before.len));
            if a < b {
                need = need.max((b - 1 - before.offset) / seg + 1);
            }
        }
        need.min(earlier_segments)
    }
}

/// One primitive with everything the engine needs to run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedPrimitive {
    /// The primitive.
    pub prim: Primitive,
    /// Its step in the schedule (for errors and costing; execution follows dependencies).
    pub step: usize,
    /// Resolved `src`, if any.
    pub src: Option<Location>,
    /// Resolved `dst`, if any.
    pub dst: Option<Location>,
    /// Transfer index of the message it receives (on the channel from its peer).
    pub recv_transfer: Option<u32>,
    /// Transfer index of each message it sends, in the order of `send_to`.
    pub send_transfers: Vec<u32>,
    /// Earlier primitives of the channel it must wait for.
    pub waits: Vec<Dependency>,
    /// For a send to one peer (and nothing else), the later receives from that peer that
    /// wait for it (only to read what it overwrites): their destinations may be offered to
    /// travel with its segments (see the engine's `offer_with_send`).
    pub offers_with: Vec<usize>,
}

/// One channel resolved for execution: its primitives in schedule order (step, then
/// position), each with its dependencies on earlier ones.
///
/// Steps are not barriers: a primitive runs a segment as soon as its message is there and
/// the segments of earlier primitives that touch the same elements (read-after-write,
/// write-after-write, write-after-read) are done, so consecutive steps pipeline segment by
/// segment. Any order that respects these dependencies computes the same result as running
/// the steps one after the other.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PlannedChannel {
    /// The primitives.
    pub ops: Vec<PlannedPrimitive>,
}

/// A schedule resolved for execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The channels, in the schedule's order.
    pub channels: Vec<PlannedChannel>,
    /// Elements of scratch the plan needs.
    pub scratch_len: usize,
    /// Whether the collective reduces (else every message is only copied by its receiver,
    /// which lets a transport leave it in the sender's memory for the receiver to read).
    pub reduces: bool,
    /// Unique to this plan (a clone keeps it: same primitives, same lengths): what an
    /// execution's per-primitive state is kept by between calls.
    pub id: u64,
    /// Elements of the longest primitive: a segment size at least this long runs every
    /// primitive in one segment.
    pub longest: usize,
    /// For a plan of one channel of at most 64 primitives, each primitive's dependencies
    /// as a bit mask of earlier primitives (bit `i`: it waits for primitive `i`); empty
    /// otherwise. When every primitive is one segment, a dependency is on the whole
    /// earlier primitive, which is all the small-call executor needs
    /// ([`crate::engine::small`]).
    pub waits_mask: Vec<u64>,
}

/// The next plan's [`Plan::id`].
static NEXT_PLAN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Why a schedule cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    /// Channel of the offending primitive.
    pub channel: usize,
    /// Step of the offending primitive.
    pub step: usize,
    /// The offending primitive.
    pub prim: String,
    /// What is wrong.
    pub reason: String,
}

impl Plan {
    /// Resolves `schedule` for the buffers in `buffers`.
    pub fn new(schedule: &Schedule, buffers: &BufferLayout) -> Result<Plan, PlanError> {
        if schedule.channels.len() > usize::from(u16::MAX) {
            let reason = format!(
                "{} channels; tags carry at most 65535",
                schedule.channels.len()
            );
            return Err(PlanError {
                channel: 0,
                step: 0,
                prim: String::new(),
                reason,
            });
        }
        let channels = schedule
            .channels
            .iter()
            .enumerate()
            .map(|(c, ch)| plan_channel(schedule, c, &ch.steps, buffers))
            .collect::<Result<Vec<_>, _>>()?;
        use super::Collective as C;
        let longest = channels
            .iter()
            .flat_map(|c| c.ops.iter().map(|p| p.prim.len()))
            .max()
            .unwrap_or(0);
        let waits_mask = match channels.as_slice() {
            [one] if one.ops.len() <= 64 => one
                .ops
                .iter()
                .map(|p| p.waits.iter().fold(0u64, |m, d| m | 1u64 << d.op))
                .collect(),
            _ => Vec::new(),
        };
        Ok(Plan {
            channels,
            longest,
            waits_mask,
            scratch_len: schedule.scratch_len,
            reduces: matches!(
                schedule.layout.collective,
                C::AllReduce | C::Reduce | C::ReduceScatter
            ),
            id: NEXT_PLAN.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Checks that no two channels touch overlapping memory where either writes (they run
    /// concurrently, so that would be a race). Quadratic: for verification, not the hot path.
    pub fn check_channels_disjoint(&self) -> Result<(), String> {
        let accesses = |ch: &PlannedChannel| -> Vec<(Location, bool)> {
            ch.ops
                .iter()
                .flat_map(|p| [p.src.map(|l| (l, false)), p.dst.map(|l| (l, true))])
                .flatten()
                .collect()
        };
        let all: Vec<Vec<(Location, bool)>> = self.channels.iter().map(accesses).collect();
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate().skip(i + 1) {
                for (la, wa) in a {
                    for (lb, wb) in b {
                        if (*wa || *wb) && la.overlaps(lb) {
                            return Err(format!("channels {i} and {j} race on {la:?} and {lb:?}"));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn plan_channel(
    schedule: &Schedule,
    channel: usize,
    steps_in: &[Vec<Primitive>],
    buffers: &BufferLayout,
) -> Result<PlannedChannel, PlanError> {
    let n = schedule.layout.nranks;
    let mut sent = vec![0u32; n];
    let mut received = vec![0u32; n];
    let mut ops: Vec<PlannedPrimitive> = Vec::new();
    for (s, prims) in steps_in.iter().enumerate() {
        for prim in prims {
            let fail = |reason: String| PlanError {
                channel,
                step: s,
                prim: prim.to_string(),
                reason,
            };
            let len = prim.len();
            for slice in [prim.src(), prim.dst()].into_iter().flatten() {
                if slice.len != len {
                    return Err(fail(format!(
                        "slice {slice} has a different length than {len}"
                    )));
                }
            }
            let resolve_one = |slice: Option<Slice>| {
                slice
                    .map(|sl| resolve(sl, buffers, schedule.scratch_len))
                    .transpose()
                    .map_err(|e| {
                        fail(format!(
                            "slice {} is outside its buffer of {} elements",
                            e.slice, e.buffer_len
                        ))
                    })
            };
            let src = resolve_one(prim.src())?;
            let dst = resolve_one(prim.dst())?;
            if dst.is_some_and(|d| d.store == Store::Input) {
                return Err(fail("writes the caller's input".into()));
            }
            if let (Some(a), Some(b)) = (src, dst) {
                if a.overlaps(&b) && a != b {
                    return Err(fail(format!("src {a:?} partially overlaps dst {b:?}")));
                }
                if a == b && a.len > 0 && matches!(prim, Primitive::Reduce { .. }) {
                    return Err(fail("reduces a slice with itself (counts it twice)".into()));
                }
            }
            let peer_index = |r: Rank| {
                if r.index() < n && r != schedule.rank {
                    Ok(r.index())
                } else {
                    Err(fail(format!("peer {} is not another rank of {n}", r.0)))
                }
            };
            let recv_transfer = match prim.recv_from() {
                Some(from) => {
                    let i = peer_index(from)?;
                    received[i] += 1;
                    Some(received[i] - 1)
                }
                None => None,
            };
            let mut send_transfers = Vec::with_capacity(prim.send_to().len());
            for &to in prim.send_to() {
                let i = peer_index(to)?;
                send_transfers.push(sent[i]);
                sent[i] += 1;
            }
            let waits = ops
                .iter()
                .enumerate()
                .filter_map(|(i, earlier)| {
                    let pairs = conflicts(earlier, src, dst);
                    (!pairs.is_empty()).then_some(Dependency { op: i, pairs })
                })
                .collect();
            ops.push(PlannedPrimitive {
                prim: prim.clone(),
                step: s,
                src,
                dst,
                recv_transfer,
                send_transfers,
                waits,
                offers_with: Vec::new(),
            });
        }
    }
    for j in 0..ops.len() {
        let later = &ops[j];
        let from = match (&later.prim, later.prim.recv_from()) {
            (Primitive::Recv { .. } | Primitive::RecvCopySend { .. }, Some(from)) => from,
            _ => continue,
        };
        let sends: Vec<usize> = later
            .waits
            .iter()
            .map(|d| d.op)
            .filter(|&i| matches!(&ops[i].prim, Primitive::Send { to, .. } if to[..] == [from]))
            .collect();
        for i in sends {
            ops[i].offers_with.push(j);
        }
    }
    Ok(PlannedChannel { ops })
}

/// The (earlier, later) location pairs where a later primitive reading `src` and writing
/// `dst` conflicts with `earlier`: read-after-write, write-after-write, write-after-read.
fn conflicts(
    earlier: &PlannedPrimitive,
    src: Option<Location>,
    dst: Option<Location>,
) -> Vec<(Location, Location)> {
    [(earlier.dst, src), (earlier.dst, dst), (earlier.src, dst)]
        .into_iter()
        .filter_map(|(a, b)| Some((a?, b?)))
        .filter(|(a, b)| a.touches(b))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: usize, len: usize) -> Location {
        Location {
            store: Store::Output,
            offset,
            len,
        }
    }

    #[test]
    fn a_segment_needs_only_the_earlier_segments_it_overlaps() {
        // Earlier op wrote [0, 100) in segments of 10; the later op reads [40, 60).
        let d = Dependency {
            op: 0,
            pairs: vec![(at(0, 100), at(40, 20))],
        };
        assert_eq!(d.needs(0, 10, 10), 5); // elements 40..50: segments 0..=4
        assert_eq!(d.needs(1, 10, 10), 6); // elements 50..60: segments 0..=5

        // Same placement: lockstep.
        let d = Dependency {
            op: 0,
            pairs: vec![(at(0, 100), at(0, 100))],
        };
        assert_eq!(d.needs(3, 10, 10), 4);
        // Unaligned: the later segment straddles two earlier ones.
        let d = Dependency {
            op: 0,
            pairs: vec![(at(5, 100), at(0, 100))],
        };
        assert_eq!(d.needs(1, 10, 10), 2); // elements 10..20 = earlier's 5..15

        // Disjoint in this segment: nothing needed yet.
        let d = Dependency {
            op: 0,
            pairs: vec![(at(50, 10), at(0, 100))],
        };
        assert_eq!(d.needs(0, 10, 1), 0);
        assert_eq!(d.needs(5, 10, 1), 1);
    }

    #[test]
    fn empty_locations_need_everything() {
        let d = Dependency {
            op: 0,
            pairs: vec![(at(0, 0), at(0, 0))],
        };
        assert_eq!(d.needs(0, 10, 1), 1);
    }
}

#[cfg(test)]
mod offers_with {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::schedule::{Collective, Layout};

    /// Per primitive of rank 0's ring all_reduce of 1000 elements: the later receives its
    /// send lists in `offers_with`.
    fn riders(nranks: usize, in_place: bool) -> Vec<Vec<usize>> {
        let layout = Layout {
            collective: Collective::AllReduce,
            nranks,
            count: 1000,
            root: Rank(0),
            in_place,
        };
        let schedule = Algorithm::Ring
            .schedule(&layout, Rank(0))
            .expect("schedule");
        let plan = Plan::new(&schedule, &layout.buffers(Rank(0))).expect("plan");
        plan.channels[0]
            .ops
            .iter()
            .map(|p| p.offers_with.clone())
            .collect()
    }

    #[test]
    fn an_in_place_send_lists_the_receive_from_its_peer_that_refills_its_memory() {
        // On 2 ranks: send own half (0), receive-reduce-send the other (1), receive own
        // half back (2), which in place overwrites what 0 sends, from the same peer.
        assert_eq!(riders(2, true), vec![vec![2], vec![], vec![]]);
        // Out of place the receive writes the output, which the send does not read.
        assert_eq!(riders(2, false), vec![Vec::<usize>::new(); 3]);
        // On 3 ranks the ring sends right and receives from the left: another peer, so
        // its offer could reach that peer before the send has gone.
        assert!(riders(3, true).iter().all(Vec::is_empty));
    }
}
