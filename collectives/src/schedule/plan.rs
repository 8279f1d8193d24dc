//! Facts both the engine and the verifier derive from a schedule, computed in one place so
//! that the verifier checks exactly what the engine runs: which message each primitive
//! sends and receives, where each slice lives once in-place aliasing is resolved, and which
//! primitives of a step must wait for which.

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

/// How a primitive waits for an earlier one in its step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Segment k waits for the earlier primitive's segment k (same length, same elements).
    Lockstep,
    /// The whole primitive waits for the whole earlier primitive.
    Whole,
}

/// One primitive with everything the engine needs to run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedPrimitive {
    /// The primitive.
    pub prim: Primitive,
    /// Resolved `src`, if any.
    pub src: Option<Location>,
    /// Resolved `dst`, if any.
    pub dst: Option<Location>,
    /// Transfer index of the message it receives (on the channel from its peer).
    pub recv_transfer: Option<u32>,
    /// Transfer index of each message it sends, in the order of `send_to`.
    pub send_transfers: Vec<u32>,
    /// Earlier primitives of the same step it must wait for.
    pub waits: Vec<(usize, Wait)>,
}

/// One channel resolved for execution.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PlannedChannel {
    /// Primitives per step.
    pub steps: Vec<Vec<PlannedPrimitive>>,
}

/// A schedule resolved for execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The channels, in the schedule's order.
    pub channels: Vec<PlannedChannel>,
    /// Elements of scratch the plan needs.
    pub scratch_len: usize,
}

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
        let channels = schedule
            .channels
            .iter()
            .enumerate()
            .map(|(c, ch)| plan_channel(schedule, c, &ch.steps, buffers))
            .collect::<Result<_, _>>()?;
        Ok(Plan {
            channels,
            scratch_len: schedule.scratch_len,
        })
    }

    /// Checks that no two channels touch overlapping memory where either writes (they run
    /// concurrently, so that would be a race). Quadratic: for verification, not the hot path.
    pub fn check_channels_disjoint(&self) -> Result<(), String> {
        let accesses = |ch: &PlannedChannel| -> Vec<(Location, bool)> {
            ch.steps
                .iter()
                .flatten()
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
    let mut steps = Vec::with_capacity(steps_in.len());
    for (s, prims) in steps_in.iter().enumerate() {
        let mut planned: Vec<PlannedPrimitive> = Vec::with_capacity(prims.len());
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
            let waits = planned
                .iter()
                .enumerate()
                .filter_map(|(i, earlier)| {
                    conflict(earlier, src, dst).map(|lockstep| {
                        let same_len = earlier.prim.len() == len;
                        (
                            i,
                            if lockstep && same_len {
                                Wait::Lockstep
                            } else {
                                Wait::Whole
                            },
                        )
                    })
                })
                .collect();
            planned.push(PlannedPrimitive {
                prim: prim.clone(),
                src,
                dst,
                recv_transfer,
                send_transfers,
                waits,
            });
        }
        steps.push(planned);
    }
    Ok(PlannedChannel { steps })
}

/// Whether a later primitive (reading `src`, writing `dst`) conflicts with `earlier`
/// (read-after-write, write-after-write or write-after-read), and if so whether every
/// overlapping pair of locations is identical (so that segment k only needs segment k).
fn conflict(
    earlier: &PlannedPrimitive,
    src: Option<Location>,
    dst: Option<Location>,
) -> Option<bool> {
    let pairs = [(earlier.dst, src), (earlier.dst, dst), (earlier.src, dst)];
    let mut any = false;
    let mut identical = true;
    for (a, b) in pairs {
        if let (Some(a), Some(b)) = (a, b) {
            if a.touches(&b) {
                any = true;
                identical &= a == b;
            }
        }
    }
    any.then_some(identical)
}
