//! Prices schedules under the alpha-beta-gamma model, from the schedules themselves.
//!
//! A *round* is a global step in which some rank sends. A message belongs to the round of
//! the primitive that sends it. Per round, the model charges one latency `alpha` plus the
//! largest number of bytes any rank sends or receives in that round over the link bandwidth
//! (`beta` per byte); per step, it charges the largest number of bytes any rank reduces at
//! the reduction rate (`gamma` per byte):
//!
//! `T = sum over rounds (alpha + o * max_rank messages + beta * max_rank max(sent, received)) + sum over steps gamma * max_rank reduced`
//!
//! where a rank's messages in a round count every message it sends and every one it
//! receives, each costing `o` of its time (a post, a completion, a system call): what
//! separates one round of p-1 messages per rank (mesh) from log p rounds of one.
//!
//! A host that runs more ranks than it has CPUs (known to [`Levels`] through
//! [`HostMap::cpus`]) makes its ranks take turns on its CPUs. Ranks are taken to hold its
//! CPUs in turn (local rank i on CPU i mod cpus, rcoll's default placement:
//! [`rcoll_transport::topology`]), and a round lasts at least what its busiest CPU does
//! for them, one thing after another:
//! - every message end of its ranks, each costing `o + switch` (a rank waits, another
//!   runs), which is what makes few messages per round win on a crowded host;
//! - every copy: a byte crossing inside the host costs one copy at each end, half of
//!   `beta` each (the rate of a rank that sends and receives at once); where receivers
//!   read the senders' memory, the whole `beta` falls on the receiver;
//! - every reduction;
//! - where ranks wait by polling memory ([`CostModel::polls`]), the round's `alpha`.
//!
//! A quarter of it is spread over the host's CPUs (`SPREAD_SHARE`). Every algorithm
//! moves the same bytes in all; what this separates is where they fall. On 3 ranks and
//! 2 CPUs, a ring's two ranks on CPU 0 copy twice what the one on CPU 1 does, in every
//! round, while halving-doubling's fold leaves one of them idle after its first message:
//! 4 copies of the vector on the busiest CPU against 5.3, and it runs faster (measured:
//! docs/src/algorithms.md, "How the model's constants were set").
//! Over loopback TCP, a byte of a large message between two ranks of one CPU costs that
//! CPU more than its two copies (`SAME_CPU_COPY`, from `SAME_CPU_MIN` bytes), which
//! puts halving-doubling's first exchange on 4 ranks (ranks 0 and 2, on one CPU) behind
//! the ring, whose neighbours are on different CPUs; a smaller one costs less
//! (`SAME_CPU_CACHED`: the receiver reads it from that CPU's caches), which puts the
//! tree, whose messages mostly stay on one CPU, first at 64-128 KiB.
//!
//! Rates depend on where the bytes are: with the built-in rates inside a host, a call
//! whose vector stays in cache ([`CACHED_VECTOR`]) copies inside the host and reduces
//! several times as fast ([`CostModel::cache_speedup`]: [`CACHE_SPEEDUP`] over shared
//! memory, [`LOOPBACK_CACHE_SPEEDUP`] over loopback TCP), which lets fewer rounds win up
//! to larger sizes.
//!
//! This is the unpipelined bound of the textbook analysis (and of the seed lecture's table);
//! the engine pipelines segments within a step and can beat it for chain and tree shapes.

use std::convert::Infallible;

use rcoll_transport::hosts::HostMap;
use rcoll_transport::Rank;

use super::Schedule;

/// Two levels of network: pairs on one host go at the `local` model's rates, the rest at
/// the call's model, and every host's traffic to other hosts shares one link (its bytes
/// per round are summed over its ranks, per direction).
#[derive(Clone, Copy, Debug)]
pub struct Levels<'a> {
    /// Where every rank runs.
    pub hosts: &'a HostMap,
    /// Rates inside a host (shared memory, or loopback).
    pub local: CostModel,
    /// Whether a rank inside a host reads a message it only copies straight from the
    /// sender's memory (shared memory's single copy): then, in a collective that reduces
    /// nothing, a round inside a host costs the receiving side only, and a rank that
    /// sends to several peers at once is not their bottleneck.
    pub receivers_read: bool,
    /// The algorithms of the hierarchical schedule's levels when they are forced
    /// (`RCOLL_LEVEL_ALGO`); `None` prices each level with its own rates
    /// ([`crate::select::choose_levels`]).
    pub level_algorithms: Option<crate::algorithm::hierarchical::LevelAlgorithms>,
}

impl CostModel {
    /// A default for ranks of one host that share memory: a round costs about what the
    /// engine's bookkeeping does; each end of a transfer copies (or reduces) at 25 GB/s,
    /// half of beta, about memcpy's rate out of cache; a call whose vector stays in cache
    /// copies and reduces [`CACHE_SPEEDUP`] times as fast (measured:
    /// docs/src/algorithms.md, "How the model's constants were set").
    pub fn shared_memory() -> CostModel {
        CostModel {
            alpha_us: 1.0,
            bandwidth_gbps: 100.0,
            reduce_gbytes_per_s: 10.0,
            overhead_us: 0.1,
            // A crowded host's ranks hand the CPU over (sched_yield) as they spin on a
            // ring: no sleep, no wake-up.
            switch_us: 0.1,
            cache_speedup: CACHE_SPEEDUP,
            polls: true,
        }
    }

    /// A default for TCP between ranks of one host (loopback): a round costs a wake-up (the
    /// waiting rank sleeps: its CPU serves others), a message a system call, bytes cross at
    /// the rate of a kernel copy each way, [`LOOPBACK_CACHE_SPEEDUP`] times as fast for a
    /// vector that stays in cache. Out of cache 25 Gbit/s: what two ranks with a CPU each
    /// reach, near what iperf3 streams reach on the same CPUs; a slower rate lets a crowded
    /// host's CPU bound (where bytes count at both ends) outweigh its message costs at
    /// sizes where the fewest messages still win (measured: docs/src/algorithms.md, "How
    /// the model's constants were set").
    pub fn tcp_loopback() -> CostModel {
        CostModel {
            alpha_us: 6.0,
            bandwidth_gbps: 25.0,
            reduce_gbytes_per_s: 10.0,
            overhead_us: 0.5,
            switch_us: SWITCH_US,
            cache_speedup: LOOPBACK_CACHE_SPEEDUP,
            polls: false,
        }
    }

    /// A default for TCP between hosts: Ethernet rates, and a round costs a system call
    /// or two each side and a wake-up.
    pub fn tcp() -> CostModel {
        CostModel {
            alpha_us: 20.0,
            bandwidth_gbps: 10.0,
            reduce_gbytes_per_s: 10.0,
            overhead_us: 3.0,
            switch_us: SWITCH_US,
            cache_speedup: 0.0,
            polls: false,
        }
    }

    fn beta(&self) -> f64 {
        8.0 / (self.bandwidth_gbps * 1e3)
    }
}

/// Machine parameters for the alpha-beta-gamma model.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CostModel {
    /// Per-round latency in microseconds (alpha).
    pub alpha_us: f64,
    /// Link bandwidth in gigabits per second (beta = 8 / (bandwidth_gbps * 1000) us per byte).
    pub bandwidth_gbps: f64,
    /// Reduction throughput in gigabytes per second (gamma = 1 / (reduce_gbytes_per_s * 1000) us per byte).
    pub reduce_gbytes_per_s: f64,
    /// Microseconds of a rank's time per message it sends or receives (o); 0 in tuning
    /// files written before it existed.
    #[serde(default)]
    pub overhead_us: f64,
    /// Microseconds a message end costs its host's CPUs beyond `o` when the host runs more
    /// ranks than it has CPUs (a rank that waits gives its CPU to another: a context switch
    /// and a wake-up); 0 in tuning files (their `o` was measured as it was).
    #[serde(default)]
    pub switch_us: f64,
    /// How many times as fast a call whose vector stays in cache (at most
    /// [`CACHED_VECTOR`] bytes) copies and reduces between ranks at these rates: the
    /// built-in shared-memory model's [`CACHE_SPEEDUP`], loopback TCP's
    /// [`LOOPBACK_CACHE_SPEEDUP`]; 0 (or 1) for none, as in tuning files (their rates were
    /// fitted over every size as they are).
    #[serde(default)]
    pub cache_speedup: f64,
    /// Whether a rank that waits for a message keeps its CPU, polling memory (shared
    /// memory, verbs): then each round's `alpha` is also time of a crowded host's CPUs. A
    /// rank that sleeps in the kernel (a socket) leaves its CPU to the host's other ranks
    /// while it waits. True in tuning files written before it existed, as they were priced.
    #[serde(default = "polls_by_default")]
    pub polls: bool,
}

fn polls_by_default() -> bool {
    true
}

/// The largest vector (a call's count times its element size) that
/// [`CostModel::cache_speedup`] prices at cache speed: a per-core L2 of 1 MiB, well inside
/// a shared L3, where copies still run at cache speed (measured: docs/src/algorithms.md,
/// "How the model's constants were set").
pub const CACHED_VECTOR: u64 = 1 << 20;

/// How many times as fast copies and reductions between ranks that share memory run in
/// cache as out of it: just above the largest gain measured, where a smaller
/// factor let more rounds of smaller messages price below fewer rounds that ran faster
/// (measured: docs/src/algorithms.md, "How the model's constants were set").
pub const CACHE_SPEEDUP: f64 = 4.0;

/// What a rank that waits on a socket costs a crowded host per message end: it sleeps in
/// the kernel and is woken again (a context switch and a wake-up, as a 2-CPU VM takes them;
/// a few microseconds on bare metal). The TCP models' `switch_us`: an 8-byte call's time on
/// the busiest CPU follows its message ends, whatever the algorithm, and this value scored
/// best against measured tables of every algorithm at every size (measured:
/// docs/src/algorithms.md, "How the model's constants were set").
pub const SWITCH_US: f64 = 4.0;

/// How many times as fast loopback TCP copies a vector that stays in cache
/// ([`CACHED_VECTOR`]): what a 64 KiB call costs beyond an 8-byte one, per byte the busiest
/// CPU copies, against the out-of-cache rate (measured: docs/src/algorithms.md, "How the
/// model's constants were set").
pub const LOOPBACK_CACHE_SPEEDUP: f64 = 3.0;

/// The share of a crowded host's work that falls on its CPUs evenly, whichever rank it is
/// for: loopback TCP processes a message's receipt on the sender's CPU and wakes ranks
/// across CPUs. The rest falls on the CPU of the rank it is for. With none, a schedule that
/// loads one CPU more than the other priced even with one that loads both alike, though the
/// uneven one ran faster (measured: docs/src/algorithms.md, "How the model's constants were
/// set").
const SPREAD_SHARE: f64 = 0.25;

impl Default for CostModel {
    /// A 100 Gbit/s fabric with 2 us per round and 0.25 us per message end, reducing at
    /// 10 GB/s; 1 us per message end on a crowded host.
    fn default() -> Self {
        CostModel {
            alpha_us: 2.0,
            bandwidth_gbps: 100.0,
            reduce_gbytes_per_s: 10.0,
            overhead_us: 0.25,
            switch_us: 1.0,
            cache_speedup: 0.0,
            polls: true,
        }
    }
}

/// What a collective costs under one algorithm.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Cost {
    /// Rounds in which some rank sends.
    pub steps: usize,
    /// Bytes sent by all ranks together.
    pub total_bytes: u64,
    /// The most bytes any rank sends or receives in one round.
    pub max_step_bytes_per_rank: u64,
    /// The most bytes any rank sends over the whole collective.
    pub max_bytes_sent_per_rank: u64,
    /// Messages (before segmentation) sent by all ranks.
    pub messages: u64,
    /// Of those, the ones between ranks on different hosts (with [`Levels`]; else 0).
    pub cross_host_messages: u64,
    /// Their bytes.
    pub cross_host_bytes: u64,
    /// Predicted time in microseconds.
    pub predicted_us: f64,
}

/// The rates `layout` (elements of `elem_size` bytes) is priced at: `model`'s and
/// `levels`', or, where the rates inside a host have a [`CostModel::cache_speedup`] and the
/// call's vector stays in cache ([`CACHED_VECTOR`]), copies inside a host and every
/// reduction that many times as fast (the network's rate stays).
fn rates_for<'a>(
    layout: &super::Layout,
    elem_size: usize,
    model: &CostModel,
    levels: Option<&Levels<'a>>,
) -> (CostModel, Option<Levels<'a>>) {
    let vector = layout.count.saturating_mul(elem_size) as u64;
    match levels {
        Some(l) if l.local.cache_speedup > 1.0 && vector <= CACHED_VECTOR => {
            let speedup = l.local.cache_speedup;
            let model = CostModel {
                reduce_gbytes_per_s: model.reduce_gbytes_per_s * speedup,
                ..*model
            };
            let local = CostModel {
                bandwidth_gbps: l.local.bandwidth_gbps * speedup,
                reduce_gbytes_per_s: l.local.reduce_gbytes_per_s * speedup,
                ..l.local
            };
            (model, Some(Levels { local, ..*l }))
        }
        _ => (*model, levels.copied()),
    }
}

/// Prices one collective given every rank's schedule and the element size in bytes.
pub fn cost(schedules: &[Schedule], elem_size: usize, model: &CostModel) -> Cost {
    cost_levels(schedules, elem_size, model, None)
}

/// Like [`cost`], with `levels`: a round then costs the slower of its two levels, the
/// local one priced per rank, the global one per host link.
pub fn cost_levels(
    schedules: &[Schedule],
    elem_size: usize,
    model: &CostModel,
    levels: Option<&Levels<'_>>,
) -> Cost {
    let n = schedules.len();
    let levels = levels.filter(|l| l.hosts.nranks() == n);
    let Some(first) = schedules.first() else {
        return Walked::default().cost(model, None, 0);
    };
    let walk = Walk::new(&first.layout, elem_size, model, levels, n);
    let mut source = InMemory::new(schedules);
    let Ok(walked) = walk.walk(0..walk.nhosts(), &mut source, |_, _| false);
    walk.cost(&walked, n)
}

/// Where a walk takes each rank's schedule, and what each rank receives.
pub(crate) trait Source {
    /// A schedule as the source hands it out.
    type Held: std::ops::Deref<Target = Schedule>;
    /// Why a schedule could not be had.
    type Error;

    /// Rank `r`'s schedule.
    fn schedule(&mut self, r: Rank) -> Result<Self::Held, Self::Error>;

    /// Calls `each(round, sender, elements)` for every message `r` (whose schedule is
    /// `own`) receives, in the round of the primitive that sends it (the model's
    /// convention); returns the work done, as [`work`] counts it. By default from the
    /// schedules of the peers `own` receives from.
    fn receives(
        &mut self,
        r: Rank,
        own: &Schedule,
        each: &mut dyn FnMut(usize, Rank, usize),
    ) -> Result<usize, Self::Error> {
        let mut peers: Vec<Rank> = own
            .primitives()
            .filter_map(|(_, _, p)| p.recv_from())
            .collect();
        peers.sort_unstable();
        peers.dedup();
        let mut visited = 0;
        for q in peers {
            let theirs = self.schedule(q)?;
            visited += work(&theirs);
            for (_, s, p) in theirs.primitives() {
                for _ in p.send_to().iter().filter(|&&to| to == r) {
                    each(s, q, p.len());
                }
            }
        }
        Ok(visited)
    }
}

/// Every rank's schedule in memory, with each rank's incoming messages indexed once (a
/// rank of a mesh hears from every other: scanning their schedules for each would take
/// p^3).
struct InMemory<'a> {
    schedules: &'a [Schedule],
    /// Per rank, the messages it receives: (round, sender, elements).
    inbox: Vec<Vec<(usize, Rank, usize)>>,
}

impl<'a> InMemory<'a> {
    fn new(schedules: &'a [Schedule]) -> InMemory<'a> {
        let mut inbox = vec![Vec::new(); schedules.len()];
        for (q, schedule) in schedules.iter().enumerate() {
            for (_, s, p) in schedule.primitives() {
                for to in p.send_to() {
                    if let Some(messages) = inbox.get_mut(to.index()) {
                        messages.push((s, Rank::from(q), p.len()));
                    }
                }
            }
        }
        InMemory { schedules, inbox }
    }
}

impl<'a> Source for InMemory<'a> {
    type Held = &'a Schedule;
    type Error = Infallible;

    fn schedule(&mut self, r: Rank) -> Result<&'a Schedule, Infallible> {
        Ok(&self.schedules[r.index()])
    }

    fn receives(
        &mut self,
        r: Rank,
        _own: &Schedule,
        each: &mut dyn FnMut(usize, Rank, usize),
    ) -> Result<usize, Infallible> {
        for &(s, q, len) in &self.inbox[r.index()] {
            each(s, q, len);
        }
        Ok(0)
    }
}

/// The hosts a walk goes through: a map's, or with one level every rank a host of its own.
enum Hosts<'a> {
    Map(&'a HostMap),
    Flat(Vec<Rank>),
}

impl Hosts<'_> {
    fn nhosts(&self) -> usize {
        match self {
            Hosts::Map(m) => m.nhosts(),
            Hosts::Flat(ranks) => ranks.len(),
        }
    }

    fn members(&self, h: usize) -> &[Rank] {
        match self {
            Hosts::Map(m) => m.members(h),
            Hosts::Flat(ranks) => std::slice::from_ref(&ranks[h]),
        }
    }

    fn same_host(&self, a: Rank, b: Rank) -> bool {
        match self {
            Hosts::Map(m) => m.same_host(a, b),
            Hosts::Flat(_) => a == b,
        }
    }

    /// Host `h`'s CPUs when it has fewer than ranks, which then take turns on them.
    fn crowded(&self, h: usize) -> Option<usize> {
        match self {
            Hosts::Map(m) => m.cpus(h).filter(|&c| m.members(h).len() > c),
            Hosts::Flat(_) => None,
        }
    }

    fn local_rank(&self, r: Rank) -> usize {
        match self {
            Hosts::Map(m) => m.local_rank(r),
            Hosts::Flat(_) => 0,
        }
    }
}

/// One walk over a job's schedules, host by host: the model's per-round loads, priced
/// alike for every schedule in memory ([`cost_levels`]) and for schedules made a rank at a
/// time at scale ([`crate::simulate::price`]). A rank's sends come from its own schedule,
/// what it receives from its [`Source`]; a host's loads are the sums over its members, so
/// a host is the unit walked, and a sample of hosts prices a sample.
pub(crate) struct Walk<'a> {
    hosts: Hosts<'a>,
    elem_size: usize,
    /// The rates priced at (after [`rates_for`]).
    model: CostModel,
    /// Two levels: the rates inside a host (`None`: one level, nothing counted as
    /// crossing hosts).
    local: Option<CostModel>,
    /// Receivers read the senders' memory and nothing is reduced: a copy's whole `beta`
    /// falls on the receiver.
    receivers_read: bool,
    /// Both ends of a transfer inside a host copy through the kernel (TCP): two ranks on
    /// one CPU pay [`SAME_CPU_COPY`] or [`SAME_CPU_CACHED`].
    tcp_inside: bool,
}

impl<'a> Walk<'a> {
    /// A walk of `layout` (elements of `elem_size` bytes, `nranks` ranks) over `levels`'
    /// hosts, or without levels every rank a host of its own, at the rates [`rates_for`]
    /// gives.
    pub(crate) fn new(
        layout: &super::Layout,
        elem_size: usize,
        model: &CostModel,
        levels: Option<&Levels<'a>>,
        nranks: usize,
    ) -> Walk<'a> {
        let hosts = match levels {
            Some(l) => Hosts::Map(l.hosts),
            None => Hosts::Flat((0..nranks).map(Rank::from).collect()),
        };
        let (model, levels) = rates_for(layout, elem_size, model, levels);
        Walk {
            hosts,
            elem_size,
            model,
            local: levels.map(|l| l.local),
            // A barrier's schedules reduce, at count 0: nothing to copy either way.
            receivers_read: levels
                .is_some_and(|l| l.receivers_read && !layout.collective.reduces()),
            tcp_inside: levels.is_some_and(|l| !l.receivers_read),
        }
    }

    /// The hosts walked.
    pub(crate) fn nhosts(&self) -> usize {
        self.hosts.nhosts()
    }

    /// What `walked` costs at this walk's rates, totals scaled from the ranks walked to
    /// `nranks`.
    pub(crate) fn cost(&self, walked: &Walked, nranks: usize) -> Cost {
        walked.cost(&self.model, self.local.as_ref(), nranks)
    }

    /// Walks the hosts of `order`, each rank's schedule and receipts from `source`, and
    /// stops before a host when `stop(visited, hosts walked)` holds. `visited` counts the
    /// work done ([`work`]).
    pub(crate) fn walk<S: Source>(
        &self,
        order: impl IntoIterator<Item = usize>,
        source: &mut S,
        mut stop: impl FnMut(usize, usize) -> bool,
    ) -> Result<Walked, S::Error> {
        let hosts = &self.hosts;
        let two_levels = self.local.is_some();
        let elem = self.elem_size as u64;
        let mut acc = Walked::default();
        let mut visited = 0usize;
        let mut rank = Loads::default();
        let mut host = Loads::default();
        let mut cpus = CpuLoads::default();
        for h in order {
            if stop(visited, acc.hosts_priced) {
                break;
            }
            acc.hosts_priced += 1;
            host.clear();
            // Local rank i on CPU i mod cpus.
            let crowded = hosts.crowded(h).filter(|_| two_levels);
            let cpu_of = |r: Rank| crowded.map(|c| hosts.local_rank(r) % c);
            cpus.clear(crowded.unwrap_or(0));
            for &r in hosts.members(h) {
                acc.ranks_priced += 1;
                rank.clear();
                let same_cpu = |q: Rank, bytes: u64| match self.tcp_inside
                    && cpu_of(r).is_some()
                    && hosts.same_host(r, q)
                    && cpu_of(r) == cpu_of(q)
                {
                    false => None,
                    true if bytes >= SAME_CPU_MIN => Some(Load::SameCpu),
                    true => Some(Load::SameCpuCached),
                };
                let own = source.schedule(r)?;
                visited += work(&own);
                let mut sent_total = 0u64;
                for (_, s, p) in own.primitives() {
                    let bytes = p.len() as u64 * elem;
                    if p.reduces() {
                        rank.add(s, Load::Reduced, bytes);
                    }
                    for &to in p.send_to() {
                        acc.round(s).sends = true;
                        acc.messages += 1;
                        acc.total_bytes += bytes;
                        sent_total += bytes;
                        if let Some(load) = same_cpu(to, bytes) {
                            rank.add(s, load, bytes);
                        }
                        if hosts.same_host(r, to) {
                            rank.add(s, Load::Sent, bytes);
                            rank.add(s, Load::Messages, 1);
                        } else {
                            rank.add(s, Load::GlobalEnds, 1);
                            host.add(s, Load::Sent, bytes);
                            host.add(s, Load::Messages, 1);
                            if two_levels {
                                acc.cross_host_messages += 1;
                                acc.cross_host_bytes += bytes;
                            }
                        }
                    }
                }
                acc.max_sent_per_rank = acc.max_sent_per_rank.max(sent_total);
                visited += source.receives(r, &own, &mut |s, q, len| {
                    // Its round has a sender, walked or not.
                    acc.round(s).sends = true;
                    let bytes = len as u64 * elem;
                    if let Some(load) = same_cpu(q, bytes) {
                        rank.add(s, load, bytes);
                    }
                    let inside = hosts.same_host(q, r);
                    if !inside {
                        rank.add(s, Load::GlobalEnds, 1);
                    }
                    let loads = if inside { &mut rank } else { &mut host };
                    loads.add(s, Load::Received, bytes);
                    loads.add(s, Load::Messages, 1);
                })?;
                drop(own);
                self.fold_rank(&rank, crowded.is_some(), &mut acc);
                if let Some(cpu) = cpu_of(r) {
                    cpus.add(cpu, &rank, self.receivers_read);
                }
            }
            for &s in &host.touched {
                let [sent, received, _, messages, ..] = host.rounds[s];
                let round = acc.round(s);
                round.global = round.global.max(sent.max(received));
                round.global_messages |= messages > 0;
            }
            if let (Some(c), Some(local)) = (crowded, &self.local) {
                cpus.fold(c, &self.model, local, &mut acc);
            }
        }
        Ok(acc)
    }

    /// Raises the job's per-round maxima to one rank's loads inside its host.
    fn fold_rank(&self, rank: &Loads, crowded: bool, acc: &mut Walked) {
        for &s in &rank.touched {
            let [sent, received, reduced, messages, global_ends, ..] = rank.rounds[s];
            // A rank of a crowded host copies at CPU speed, each end of a transfer its own
            // half: what it sends and receives together at half of beta (its CPU's other
            // ranks are counted in `cpu_us`).
            let local = match (self.receivers_read, crowded) {
                (true, _) => received,
                (false, false) => sent.max(received),
                (false, true) => (sent + received).div_ceil(2),
            };
            acc.max_local_moved = acc.max_local_moved.max(sent.max(received));
            let round = acc.round(s);
            round.local = round.local.max(local);
            round.local_messages |= messages > 0;
            round.local_ends = round.local_ends.max(messages);
            round.global_ends = round.global_ends.max(global_ends);
            round.reduced = round.reduced.max(reduced);
        }
    }
}

/// What visiting `s` costs a walk: its primitives, or its steps where it has more (a
/// pipelined schedule over many hosts has thousands of steps, most of them empty for any
/// one rank, and making them is most of its cost).
fn work(s: &Schedule) -> usize {
    let steps: usize = s.channels.iter().map(|c| c.steps.len()).sum();
    s.primitive_count().max(steps)
}

/// The job's per-round maxima and totals over the hosts walked so far.
#[derive(Default)]
pub(crate) struct Walked {
    rounds: Vec<Round>,
    total_bytes: u64,
    messages: u64,
    cross_host_messages: u64,
    cross_host_bytes: u64,
    max_sent_per_rank: u64,
    /// The most bytes a rank sent or received inside its host in one round, as moved (a
    /// crowded host's ranks are priced on half their sum, not reported so).
    max_local_moved: u64,
    ranks_priced: usize,
    /// Hosts walked.
    pub(crate) hosts_priced: usize,
}

impl Walked {
    fn round(&mut self, s: usize) -> &mut Round {
        if self.rounds.len() <= s {
            self.rounds.resize(s + 1, Round::default());
        }
        &mut self.rounds[s]
    }

    /// The price at `model`'s rates (and `local`'s inside a host, with two levels),
    /// totals scaled from the ranks walked to `nranks`.
    fn cost(&self, model: &CostModel, local: Option<&CostModel>, nranks: usize) -> Cost {
        let scale = |x: u64| -> u64 {
            if self.ranks_priced == nranks {
                x
            } else {
                (x as f64 * nranks as f64 / self.ranks_priced.max(1) as f64).round() as u64
            }
        };
        let sending = self.rounds.iter().filter(|r| r.sends);
        Cost {
            steps: sending.clone().count(),
            total_bytes: scale(self.total_bytes),
            max_step_bytes_per_rank: sending
                .map(|r| r.global)
                .fold(self.max_local_moved, u64::max),
            max_bytes_sent_per_rank: self.max_sent_per_rank,
            messages: scale(self.messages),
            cross_host_messages: scale(self.cross_host_messages),
            cross_host_bytes: scale(self.cross_host_bytes),
            predicted_us: price_rounds(&self.rounds, model, local),
        }
    }
}

#[derive(Clone, Copy)]
enum Load {
    Sent,
    Received,
    Reduced,
    /// Message ends (sent or received): a rank's inside its host, a host's across.
    Messages,
    /// A rank's message ends across hosts.
    GlobalEnds,
    /// Bytes to or from a rank on the same CPU of a crowded host (over TCP only), in
    /// messages of at least [`SAME_CPU_MIN`] bytes.
    SameCpu,
    /// And in smaller messages.
    SameCpuCached,
}

const LOADS: usize = 7;

/// One rank's (or host's) loads per round, sparse: only the rounds it touches are reset.
#[derive(Default)]
struct Loads {
    rounds: Vec<[u64; LOADS]>,
    touched: Vec<usize>,
}

impl Loads {
    fn add(&mut self, round: usize, load: Load, bytes: u64) {
        // A round is touched once, by its first load that is not zero.
        if bytes == 0 {
            return;
        }
        if self.rounds.len() <= round {
            self.rounds.resize(round + 1, [0; LOADS]);
        }
        let cell = &mut self.rounds[round];
        if *cell == [0; LOADS] {
            self.touched.push(round);
        }
        cell[load as usize] += bytes;
    }

    fn clear(&mut self) {
        for &s in &self.touched {
            self.rounds[s] = [0; LOADS];
        }
        self.touched.clear();
    }
}

/// A crowded host's CPUs' loads per round, summed over the ranks each holds.
#[derive(Default)]
struct CpuLoads {
    /// Per round, per CPU.
    rounds: Vec<Vec<CpuRound>>,
    touched: Vec<usize>,
    cpus: usize,
}

impl CpuLoads {
    fn clear(&mut self, cpus: usize) {
        for &s in &self.touched {
            self.rounds[s].clear();
        }
        self.touched.clear();
        self.cpus = cpus;
    }

    /// Adds what one rank on `cpu` does in each round it touches.
    fn add(&mut self, cpu: usize, rank: &Loads, receivers_read: bool) {
        for &s in &rank.touched {
            let [sent, received, reduced, messages, global_ends, same_cpu, same_cpu_cached] =
                rank.rounds[s];
            if self.rounds.len() <= s {
                self.rounds.resize(s + 1, Vec::new());
            }
            let per_cpu = &mut self.rounds[s];
            if per_cpu.is_empty() {
                per_cpu.resize(self.cpus, CpuRound::default());
                self.touched.push(s);
            }
            per_cpu[cpu].add(&CpuRound {
                inside_ends: messages,
                across_ends: global_ends,
                copies: match receivers_read {
                    true => 2 * received,
                    false => sent + received,
                },
                same_cpu,
                same_cpu_cached,
                reduced,
            });
        }
    }

    /// Raises each round's `cpu_us` to this host's busiest CPU's time: what the ranks it
    /// holds do, one thing after another, with a share of the host's work spread over its
    /// CPUs ([`SPREAD_SHARE`]) and, where ranks poll, the round's `alpha`.
    fn fold(&self, cpus: usize, model: &CostModel, local: &CostModel, acc: &mut Walked) {
        let waits = if local.polls { local.alpha_us } else { 0.0 };
        for &s in &self.touched {
            let per_cpu = &self.rounds[s];
            let mut host = CpuRound::default();
            for c in per_cpu {
                host.add(c);
            }
            let spread = SPREAD_SHARE * host.us(model, local) / cpus as f64;
            let round = acc.round(s);
            for c in per_cpu.iter().filter(|c| **c != CpuRound::default()) {
                let us = waits + (1.0 - SPREAD_SHARE) * c.us(model, local) + spread;
                round.cpu_us = round.cpu_us.max(us);
            }
        }
    }
}

/// What a copy costs, in halves of `beta`, when loopback TCP runs both ends of a transfer
/// on one CPU, against each end on a CPU of its own: the CPU time per byte of 2 ranks on
/// one CPU against two, for large transfers (measured: docs/src/algorithms.md, "How the
/// model's constants were set"). Smaller transfers do not pay it (below).
const SAME_CPU_COPY: f64 = 1.8;

/// The least bytes of a message that pay [`SAME_CPU_COPY`]: smaller ones stay in the CPU's
/// caches and cost less per byte on one CPU; above it the cost per byte rises to
/// [`SAME_CPU_COPY`] (measured: docs/src/algorithms.md, "How the model's constants were
/// set").
const SAME_CPU_MIN: u64 = 256 << 10;

/// What a copy costs, in halves of `beta`, when loopback TCP runs both ends of a transfer
/// smaller than [`SAME_CPU_MIN`] on one CPU: the receiver reads what that CPU's caches took
/// from the sender a moment before, cheaper than across CPUs; it makes a schedule whose
/// messages stay between ranks of one CPU the choice where it ran fastest or within 1.02 of
/// it (measured: docs/src/algorithms.md, "How the model's constants were set").
const SAME_CPU_CACHED: f64 = 0.7;

/// What the ranks a CPU holds (or one rank) do in one round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct CpuRound {
    /// Message ends (sent or received) inside the host.
    inside_ends: u64,
    /// Message ends across hosts.
    across_ends: u64,
    /// Copy halves inside the host: bytes sent plus bytes received, each costing half of
    /// the local `beta` (a received byte counts twice where receivers read the senders'
    /// memory).
    copies: u64,
    /// Of those, bytes to or from a rank on the same CPU (over TCP only), in messages of
    /// at least [`SAME_CPU_MIN`] bytes.
    same_cpu: u64,
    /// And in smaller messages.
    same_cpu_cached: u64,
    /// Bytes reduced.
    reduced: u64,
}

impl CpuRound {
    fn add(&mut self, o: &CpuRound) {
        self.inside_ends += o.inside_ends;
        self.across_ends += o.across_ends;
        self.copies += o.copies;
        self.same_cpu += o.same_cpu;
        self.same_cpu_cached += o.same_cpu_cached;
        self.reduced += o.reduced;
    }

    /// The CPU's time for all of it, one thing after another: every message end (`o` and
    /// a switch to the rank it wakes), every copy and every reduction.
    fn us(&self, model: &CostModel, local: &CostModel) -> f64 {
        let gamma = 1.0 / (model.reduce_gbytes_per_s * 1e3);
        self.inside_ends as f64 * (local.overhead_us + local.switch_us)
            + self.across_ends as f64 * (model.overhead_us + model.switch_us)
            + local.beta() / 2.0
                * (self.copies as f64
                    + (SAME_CPU_COPY - 1.0) * self.same_cpu as f64
                    + (SAME_CPU_CACHED - 1.0) * self.same_cpu_cached as f64)
            + gamma * self.reduced as f64
    }
}

/// One round's busiest loads, the inputs of the model's sum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Round {
    /// Whether any rank sends in it.
    sends: bool,
    /// Whether a message crosses hosts in it (any message, without levels).
    global_messages: bool,
    /// Whether a message stays inside a host in it (with levels).
    local_messages: bool,
    /// Bytes over the busiest network link, one direction (per host link with levels).
    global: u64,
    /// Bytes over the busiest rank's connections inside its host, one direction; for a
    /// rank of a crowded host, half what it sends and receives there together.
    local: u64,
    /// Bytes the busiest rank reduces.
    reduced: u64,
    /// Messages the busiest rank sends and receives across hosts (all, without levels).
    global_ends: u64,
    /// Messages the busiest rank sends and receives inside its host (with levels).
    local_ends: u64,
    /// On the hosts with more ranks than CPUs, the busiest CPU's time in microseconds
    /// (0 when no host is crowded, or their CPUs are unknown).
    cpu_us: f64,
}

/// The share of a round's lesser bound (its busiest rank's, or its busiest CPU's on a
/// crowded host) added to the greater: a tie-break, small against either bound, so that
/// where schedules copy alike per CPU the one whose busiest rank has less of its own to
/// do prices lower, as it runs faster (measured: docs/src/algorithms.md, "How the
/// model's constants were set").
const TIE_SHARE: f64 = 0.01;

/// The model's sum over `rounds`. With `local` (two levels), a round costs the slower of
/// its two levels, and a level no message of the round uses costs nothing (an empty
/// message still costs its level's latency).
fn price_rounds(rounds: &[Round], model: &CostModel, local: Option<&CostModel>) -> f64 {
    let gamma_us_per_byte = 1.0 / (model.reduce_gbytes_per_s * 1e3);
    let mut predicted_us = 0.0;
    for r in rounds {
        let mut round_us = 0.0;
        if r.sends {
            let global = if r.global_messages || local.is_none() {
                model.alpha_us
                    + model.overhead_us * r.global_ends as f64
                    + model.beta() * r.global as f64
            } else {
                0.0
            };
            let within = match local {
                Some(l) if r.local_messages => {
                    l.alpha_us + l.overhead_us * r.local_ends as f64 + l.beta() * r.local as f64
                }
                _ => 0.0,
            };
            round_us = global.max(within);
        }
        round_us += gamma_us_per_byte * r.reduced as f64;
        // A crowded host's busiest CPU takes every message end, copy and reduction of the
        // ranks it holds, one after another, and a share of the host's other work.
        let cpu_us = r.cpu_us;
        // Where the CPUs bound two schedules alike (they move the same bytes per CPU), the
        // one whose busiest rank has less of its own to do waits less: a small share of
        // the lesser bound breaks the tie.
        predicted_us += round_us.max(cpu_us) + TIE_SHARE * round_us.min(cpu_us);
    }
    predicted_us
}
