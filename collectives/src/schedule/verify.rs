//! The symbolic verifier: runs every rank's schedule on provenance-tagged elements and
//! checks the collective's definition.
//!
//! Each element holds a [`Sym`]: the index it had in its origin's input and the set of
//! ranks whose contributions it sums. Inputs start as `{index i, ranks {r}}`; everything else
//! starts undefined. Messages are matched exactly as the engine matches them
//! ([`Plan`]), and a primitive runs as soon as its message has arrived and the earlier
//! primitives it depends on are done — the engine's rule at whole-primitive granularity.
//! The run fails on a deadlock, on reading undefined data, on
//! reducing elements of different indices or overlapping contributor sets (double counting),
//! on writing the caller's input, on touching the buffer outside the output when in place,
//! and on any output element that differs from the definition. For barriers it also checks
//! causality: every rank must have heard, directly or transitively (through messages and
//! dependencies, the only order the engine keeps), from every other rank.

use std::collections::HashMap;
use std::fmt;

use rcoll_transport::Rank;

use super::plan::{Location, Plan, PlannedPrimitive, Store};
use super::{Collective, Layout, Schedule};

/// A symbolic element: origin index and contributor set (bit r = rank r); `ranks == 0`
/// means undefined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sym {
    /// Index in the origin rank's input.
    pub index: u32,
    /// Contributing ranks.
    pub ranks: u64,
}

impl Sym {
    const UNDEFINED: Sym = Sym { index: 0, ranks: 0 };

    fn of(index: usize, rank: usize) -> Sym {
        Sym {
            index: index as u32,
            ranks: 1 << rank,
        }
    }
}

/// Largest group the verifier can model (one bit per rank).
pub const MAX_RANKS: usize = 64;

/// A schedule that does not implement its collective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// The rank where the problem shows.
    pub rank: Rank,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {}: {}", self.rank.0, self.message)
    }
}

impl std::error::Error for VerifyError {}

struct RankState {
    plan: Plan,
    input: Vec<Sym>,
    output: Vec<Sym>,
    scratch: Vec<Sym>,
    initial_output: Vec<Sym>,
    channels: Vec<ChannelState>,
}

#[derive(Default)]
struct ChannelState {
    done: Vec<bool>,
    /// Per primitive: the ranks it had heard from when it ran.
    knows: Vec<u64>,
}

impl RankState {
    fn finished(&self) -> bool {
        self.channels.iter().all(|c| c.done.iter().all(|d| *d))
    }

    fn knows(&self, me: usize) -> u64 {
        self.channels
            .iter()
            .flat_map(|c| &c.knows)
            .fold(1 << me, |k, o| k | o)
    }
}

type MessageKey = (usize, usize, usize, u32); // (from, to, channel, transfer)

struct Message {
    data: Vec<Sym>,
    knows: u64,
}

/// Verifies that `schedules` (one per rank, `schedules[r].rank == r`) implement `layout`.
pub fn verify(layout: &Layout, schedules: &[Schedule]) -> Result<(), VerifyError> {
    let n = layout.nranks;
    let err = |rank: usize, message: String| VerifyError {
        rank: Rank::from(rank),
        message,
    };
    if n > MAX_RANKS {
        return Err(err(
            0,
            format!("the verifier models at most {MAX_RANKS} ranks"),
        ));
    }
    if schedules.len() != n {
        return Err(err(
            0,
            format!("{} schedules for {n} ranks", schedules.len()),
        ));
    }
    let mut ranks = Vec::with_capacity(n);
    for (r, schedule) in schedules.iter().enumerate() {
        if schedule.rank.index() != r || schedule.layout != *layout {
            return Err(err(r, "schedule is for another rank or layout".into()));
        }
        let buffers = layout.buffers(Rank::from(r));
        let plan = Plan::new(schedule, &buffers).map_err(|e| {
            err(
                r,
                format!(
                    "channel {} step {}: {}: {}",
                    e.channel, e.step, e.prim, e.reason
                ),
            )
        })?;
        plan.check_channels_disjoint().map_err(|m| err(r, m))?;
        let (input, mut output) = if buffers.in_place {
            (Vec::new(), vec![Sym::UNDEFINED; buffers.storage_len])
        } else {
            (
                (0..buffers.input.len).map(|i| Sym::of(i, r)).collect(),
                vec![Sym::UNDEFINED; buffers.output.len],
            )
        };
        if buffers.in_place {
            for i in 0..buffers.input.len {
                output[buffers.input.offset + i] = Sym::of(i, r);
            }
        }
        let channels = plan
            .channels
            .iter()
            .map(|c| ChannelState {
                done: vec![false; c.ops.len()],
                knows: vec![1 << r; c.ops.len()],
            })
            .collect();
        ranks.push(RankState {
            plan,
            input,
            initial_output: output.clone(),
            output,
            scratch: vec![Sym::UNDEFINED; schedule.scratch_len],
            channels,
        });
    }

    let mut messages: HashMap<MessageKey, Message> = HashMap::new();
    loop {
        let mut progress = false;
        for (r, state) in ranks.iter_mut().enumerate() {
            progress |= advance(r, state, &mut messages).map_err(|m| err(r, m))?;
        }
        if ranks.iter().all(RankState::finished) {
            break;
        }
        if !progress {
            let mut stuck = Vec::new();
            for (r, state) in ranks.iter().enumerate() {
                for (c, (cs, plan)) in state.channels.iter().zip(&state.plan.channels).enumerate() {
                    if let Some(j) = cs.done.iter().position(|d| !*d) {
                        let p = &plan.ops[j];
                        stuck.push(format!(
                            "rank {r} channel {c} step {} on {}",
                            p.step, p.prim
                        ));
                    }
                }
            }
            return Err(err(0, format!("deadlock: {}", stuck.join("; "))));
        }
    }
    if let Some(((src, dst, c, t), _)) = messages.iter().next() {
        return Err(err(
            *dst,
            format!("message {t} on channel {c} from rank {src} was never received"),
        ));
    }
    for (r, state) in ranks.iter().enumerate() {
        check_result(layout, r, state).map_err(|m| err(r, m))?;
    }
    Ok(())
}

/// Runs whatever rank `r` can run now, on every channel; returns whether anything ran.
fn advance(
    r: usize,
    state: &mut RankState,
    messages: &mut HashMap<MessageKey, Message>,
) -> Result<bool, String> {
    let mut progress = false;
    for c in 0..state.channels.len() {
        progress |= advance_channel(r, c, state, messages)?;
    }
    Ok(progress)
}

fn advance_channel(
    r: usize,
    c: usize,
    state: &mut RankState,
    messages: &mut HashMap<MessageKey, Message>,
) -> Result<bool, String> {
    let mut progress = false;
    let nops = state.plan.channels[c].ops.len();
    let mut ran_any = true;
    while ran_any {
        ran_any = false;
        for j in 0..nops {
            if state.channels[c].done[j] {
                continue;
            }
            let p = state.plan.channels[c].ops[j].clone();
            let cs = &state.channels[c];
            if p.waits.iter().any(|d| !cs.done[d.op]) {
                continue;
            }
            let mut knows = 1u64 << r;
            for d in &p.waits {
                knows |= cs.knows[d.op];
            }
            let received = match (p.prim.recv_from(), p.recv_transfer) {
                (Some(from), Some(t)) => match messages.remove(&(from.index(), r, c, t)) {
                    Some(m) => Some(m),
                    None => continue,
                },
                _ => None,
            };
            if let Some(m) = &received {
                if m.data.len() != p.prim.len() {
                    return Err(format!(
                        "channel {c} step {}: {}: message has {} elements, expected {}",
                        p.step,
                        p.prim,
                        m.data.len(),
                        p.prim.len()
                    ));
                }
                knows |= m.knows;
            }
            run(state, &p, received.map(|m| m.data), messages, (r, c), knows)
                .map_err(|e| format!("channel {c} step {}: {}: {e}", p.step, p.prim))?;
            let cs = &mut state.channels[c];
            cs.done[j] = true;
            cs.knows[j] = knows;
            ran_any = true;
            progress = true;
        }
    }
    Ok(progress)
}

fn read(state: &RankState, loc: Location) -> Result<Vec<Sym>, String> {
    let store = match loc.store {
        Store::Input => &state.input,
        Store::Output => &state.output,
        Store::Scratch => &state.scratch,
    };
    let data = store[loc.offset..loc.offset + loc.len].to_vec();
    if let Some(i) = data.iter().position(|s| s.ranks == 0) {
        return Err(format!(
            "reads undefined element {} of {:?}",
            loc.offset + i,
            loc.store
        ));
    }
    Ok(data)
}

fn write(state: &mut RankState, loc: Location, data: &[Sym]) {
    let store = match loc.store {
        // Plan::new rejects writes to the input.
        Store::Input => &mut state.input,
        Store::Output => &mut state.output,
        Store::Scratch => &mut state.scratch,
    };
    store[loc.offset..loc.offset + loc.len].copy_from_slice(data);
}

fn reduce(a: &[Sym], b: &[Sym]) -> Result<Vec<Sym>, String> {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.index != y.index {
                Err(format!(
                    "reduces element {} with element {}",
                    x.index, y.index
                ))
            } else if x.ranks & y.ranks != 0 {
                Err(format!(
                    "counts ranks {:#b} twice in element {}",
                    x.ranks & y.ranks,
                    x.index
                ))
            } else {
                Ok(Sym {
                    index: x.index,
                    ranks: x.ranks | y.ranks,
                })
            }
        })
        .collect()
}

fn run(
    state: &mut RankState,
    p: &PlannedPrimitive,
    received: Option<Vec<Sym>>,
    messages: &mut HashMap<MessageKey, Message>,
    (r, c): (usize, usize),
    knows: u64,
) -> Result<(), String> {
    use super::Primitive as P;
    let src = p.src.map(|l| read(state, l)).transpose()?;
    let recv = || received.clone().ok_or_else(|| "no message".to_string());
    let (store, send): (Option<Vec<Sym>>, Option<Vec<Sym>>) = match &p.prim {
        P::Send { .. } => (None, src),
        P::Recv { .. } => (Some(recv()?), None),
        P::RecvReduceSend { .. } => (None, Some(reduce(&recv()?, &src.unwrap_or_default())?)),
        P::RecvReduceCopy { .. } => (Some(reduce(&recv()?, &src.unwrap_or_default())?), None),
        P::RecvCopySend { .. } => {
            let x = recv()?;
            (Some(x.clone()), Some(x))
        }
        P::RecvReduceCopySend { .. } => {
            let x = reduce(&recv()?, &src.unwrap_or_default())?;
            (Some(x.clone()), Some(x))
        }
        P::Copy { .. } => (src, None),
        P::Reduce { .. } => {
            let dst = p
                .dst
                .map(|l| read(state, l))
                .transpose()?
                .unwrap_or_default();
            (Some(reduce(&dst, &src.unwrap_or_default())?), None)
        }
    };
    if let (Some(data), Some(loc)) = (store, p.dst) {
        write(state, loc, &data);
    }
    if let Some(data) = send {
        for (to, t) in p.prim.send_to().iter().zip(&p.send_transfers) {
            messages.insert(
                (r, to.index(), c, *t),
                Message {
                    data: data.clone(),
                    knows,
                },
            );
        }
    }
    Ok(())
}

/// The value the definition requires at output element `i` of rank `r`.
fn expected(layout: &Layout, r: usize, i: usize) -> Sym {
    let (n, c) = (layout.nranks, layout.count);
    let all = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    let root = layout.root.index();
    match layout.collective {
        Collective::AllReduce | Collective::Reduce => Sym {
            index: i as u32,
            ranks: all,
        },
        Collective::Broadcast => Sym::of(i, root),
        Collective::AllGather | Collective::Gather => Sym::of(i % c.max(1), i / c.max(1)),
        Collective::ReduceScatter => Sym {
            index: (r * c + i) as u32,
            ranks: all,
        },
        Collective::Scatter => Sym::of(r * c + i, root),
        Collective::AllToAll => Sym::of(r * c + i % c.max(1), i / c.max(1)),
        Collective::Barrier | Collective::SendRecv => Sym::UNDEFINED,
    }
}

fn check_result(layout: &Layout, r: usize, state: &RankState) -> Result<(), String> {
    let buffers = layout.buffers(Rank::from(r));
    let out = buffers.output;
    for i in 0..out.len {
        let got = state.output[out.offset + i];
        let want = expected(layout, r, i);
        if got != want {
            return Err(format!(
                "output[{i}] is {got:?}, the definition of {} requires {want:?}",
                layout.collective
            ));
        }
    }
    if buffers.in_place {
        for (i, (got, was)) in state.output.iter().zip(&state.initial_output).enumerate() {
            if (i < out.offset || i >= out.end()) && got != was {
                return Err(format!(
                    "in place, element {i} outside the output was modified"
                ));
            }
        }
    }
    if layout.collective == Collective::Barrier {
        let all = if layout.nranks == 64 {
            u64::MAX
        } else {
            (1u64 << layout.nranks) - 1
        };
        if state.knows(r) != all {
            return Err(format!(
                "barrier: leaves having heard only from ranks {:#b}",
                state.knows(r)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::schedule::{Primitive, Slice};

    fn layout(collective: Collective, nranks: usize, count: usize, in_place: bool) -> Layout {
        Layout {
            collective,
            nranks,
            count,
            root: Rank(0),
            in_place,
        }
    }

    fn ring(l: &Layout) -> Vec<Schedule> {
        Algorithm::Ring.schedules(l).unwrap()
    }

    fn expect_error(l: &Layout, schedules: &[Schedule], needle: &str) {
        let e = verify(l, schedules).expect_err("a broken schedule must not verify");
        assert!(e.message.contains(needle), "expected {needle:?} in {e}");
    }

    #[test]
    fn a_correct_schedule_verifies() {
        let l = layout(Collective::AllReduce, 4, 10, false);
        verify(&l, &ring(&l)).unwrap();
    }

    #[test]
    fn a_missing_receive_is_a_deadlock_or_an_orphan_message() {
        let l = layout(Collective::AllReduce, 3, 9, false);
        let mut s = ring(&l);
        s[1].channels[0].steps[2].clear();
        let e = verify(&l, &s).unwrap_err();
        assert!(
            e.message.contains("deadlock") || e.message.contains("never received"),
            "{e}"
        );
    }

    #[test]
    fn double_counting_is_caught() {
        let l = layout(Collective::AllReduce, 2, 4, false);
        let mut s = ring(&l);
        // Rank 0 adds its own input a second time after the all-reduce.
        s[0].push(
            3,
            Primitive::Reduce {
                src: Slice::input(0, 4),
                dst: Slice::output(0, 4),
            },
        );
        expect_error(&l, &s, "twice");
    }

    #[test]
    fn reducing_misaligned_elements_is_caught() {
        let l = layout(Collective::AllReduce, 2, 4, false);
        let mut s = ring(&l);
        let step0 = &mut s[0].channels[0].steps[0];
        step0[0] = Primitive::Send {
            to: vec![Rank(1)],
            src: Slice::input(1, 2),
        };
        expect_error(&l, &s, "reduces element");
    }

    #[test]
    fn reading_undefined_data_is_caught() {
        let l = layout(Collective::Broadcast, 2, 4, false);
        let mut s = ring(&l);
        s[1].push(
            5,
            Primitive::Copy {
                src: Slice::scratch(0, 4),
                dst: Slice::output(0, 4),
            },
        );
        expect_error(&l, &s, "undefined");
    }

    #[test]
    fn a_wrong_result_is_caught() {
        let l = layout(Collective::AllGather, 3, 2, false);
        let mut s = ring(&l);
        // Rank 2 overwrites block 0 with its own block.
        s[2].push(
            9,
            Primitive::Copy {
                src: Slice::input(0, 2),
                dst: Slice::output(0, 2),
            },
        );
        expect_error(&l, &s, "requires");
    }

    #[test]
    fn writing_the_input_is_rejected() {
        let l = layout(Collective::AllReduce, 2, 4, false);
        let mut s = ring(&l);
        s[0].push(
            0,
            Primitive::Copy {
                src: Slice::output(0, 4),
                dst: Slice::input(0, 4),
            },
        );
        expect_error(&l, &s, "input");
    }

    #[test]
    fn clobbering_outside_the_output_in_place_is_caught() {
        let l = layout(Collective::ReduceScatter, 2, 3, true);
        // Rank 0's output is elements 0..3 of its buffer; it writes its result over 3..6 too.
        let mut s = ring(&l);
        s[0].push(
            5,
            Primitive::Copy {
                src: Slice::output(0, 3),
                dst: Slice::input(3, 3),
            },
        );
        expect_error(&l, &s, "outside the output");
    }

    #[test]
    fn a_barrier_that_does_not_wait_for_everyone_is_caught() {
        let l = layout(Collective::Barrier, 3, 0, false);
        // Rank 2 only tells rank 0 it arrived; ranks 0 and 1 exchange; rank 2 leaves at once.
        let mut s: Vec<Schedule> = (0..3).map(|r| Schedule::new(l, Rank::from(r))).collect();
        let token = Slice::output(0, 0);
        s[2].push(
            0,
            Primitive::Send {
                to: vec![Rank(0)],
                src: token,
            },
        );
        s[0].push(
            0,
            Primitive::Recv {
                from: Rank(2),
                dst: token,
            },
        );
        s[0].push(
            0,
            Primitive::Send {
                to: vec![Rank(1)],
                src: token,
            },
        );
        s[1].push(
            0,
            Primitive::Recv {
                from: Rank(0),
                dst: token,
            },
        );
        expect_error(&l, &s, "barrier");
    }

    #[test]
    fn channels_that_race_are_caught() {
        let l = layout(Collective::AllReduce, 2, 4, false);
        let mut s = ring(&l);
        s[0].push_on(
            1,
            0,
            Primitive::Copy {
                src: Slice::input(0, 4),
                dst: Slice::output(0, 4),
            },
        );
        expect_error(&l, &s, "race");
    }
}
