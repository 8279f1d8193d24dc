//! How far apart two CPUs are, measured: the round trip of one cache line between two
//! threads bound to them, as a rank's flag or ring head makes it when it hands a message to
//! a rank on the other CPU.
//!
//! It is no constant of the machine: on a VM it can change several times over from one
//! minute to the next (the host moving the vCPUs), and with it the cost of algorithms that
//! cross CPUs at every step (measured: docs/src/topology.md, "Why ranks are bound,
//! measured").
//! `rcoll-bench topo` prints it, and the regret figure beside each table.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::bind;
use super::{CpuSet, Placement, Topology};

/// Round trips per batch; a batch's mean is one sample.
const PER_BATCH: u64 = 100;

/// Batches: the best of them is the answer (a batch in which the scheduler ran something
/// else on either CPU is slower, never faster).
const BATCHES: u64 = 50;

/// Spins between two looks at the clock.
const CLOCK_EVERY: u32 = 1024;

/// The shared line, alone in its 128 bytes (two 64-byte lines: adjacent-line prefetch
/// would otherwise drag a neighbour along).
#[repr(align(128))]
struct Line(AtomicU64);

/// The best mean round trip of a cache line between CPUs `a` and `b` over `BATCHES`
/// batches of `PER_BATCH`, or why there is none: the two are one CPU, a thread could not
/// be bound to its CPU (offline, or outside this process's cgroup) or started, or not one
/// batch finished `within` (a CPU taken by others all that time). When `within` runs out
/// after some batches, the best of those is the answer.
pub fn line_round_trip(a: u32, b: u32, within: Duration) -> Result<Duration, String> {
    if a == b {
        return Err(format!("CPU {a} with itself: a round trip needs two CPUs"));
    }
    let deadline = Instant::now() + within.min(Duration::from_secs(3600));
    let line = Arc::new(Line(AtomicU64::new(0)));
    // The ping of round i is 2i+1, its answer 2i+2. Each side writes only over the value it
    // waits for, so GONE (a side that stopped early, stored over anything) stays.
    let rounds = 1 + BATCHES * PER_BATCH;
    let answer = std::thread::Builder::new()
        .name("rcoll-probe-answer".into())
        .spawn({
            let line = Arc::clone(&line);
            move || -> Result<(), String> {
                let mut side = Side::new(&line.0);
                pin(b)?;
                for i in 0..rounds {
                    pass(&line.0, 2 * i + 1, deadline).map_err(|stop| match stop {
                        Stop::Late => format!("CPU {b} saw no ping from CPU {a} within {within:?}"),
                        Stop::Gone => format!("CPU {b}: {GONE_WORDS}"),
                    })?;
                }
                side.finished = true;
                Ok(())
            }
        })
        .map_err(|e| format!("cannot start the probe's thread for CPU {b}: {e}"))?;
    let ping = std::thread::Builder::new()
        .name("rcoll-probe-ping".into())
        .spawn({
            let line = Arc::clone(&line);
            move || -> Result<Duration, String> {
                // Dropped before the last round, it releases the answering side.
                let mut side = Side::new(&line.0);
                pin(a)?;
                let mut best = Duration::MAX;
                for i in 0..rounds {
                    if let Err(stop) = pass(&line.0, 2 * i, deadline) {
                        return match (stop, best) {
                            (Stop::Late, Duration::MAX) => {
                                Err(format!("CPU {b} did not answer CPU {a} within {within:?}"))
                            }
                            (Stop::Late, _) => Ok(best),
                            (Stop::Gone, _) => Err(format!("CPU {a}: {GONE_WORDS}")),
                        };
                    }
                    // Ping i is out, so the answer to ping i-1 is in: a batch is the
                    // PER_BATCH round trips from one such point to the next (the last
                    // round's ping only closes the last batch).
                    if i % PER_BATCH == 0 {
                        if i > 0 {
                            best = best.min(side.since.elapsed() / PER_BATCH as u32);
                            if Instant::now() >= deadline {
                                return Ok(best);
                            }
                        }
                        side.since = Instant::now();
                    }
                }
                // The answering side answers the last ping and stops on its own.
                side.finished = true;
                Ok(best)
            }
        });
    let ping = match ping {
        Ok(p) => p,
        Err(e) => {
            line.0.store(GONE, Ordering::Release);
            let _ = answer.join();
            return Err(format!("cannot start the probe's thread for CPU {a}: {e}"));
        }
    };
    let pinged = ping
        .join()
        .map_err(|_| format!("the probe's thread on CPU {a} panicked"))?;
    let answered = answer
        .join()
        .map_err(|_| format!("the probe's thread on CPU {b} panicked"))?;
    // A measurement stands (the answering side only saw the pinging side stop). Else the
    // answering side's own failure (its CPU) says why, before the pinging side's report
    // that it went.
    match (pinged, answered) {
        (Ok(best), _) => Ok(best),
        (Err(_), Err(e)) if !e.ends_with(GONE_WORDS) => Err(e),
        (Err(e), _) => Err(e),
    }
}

/// A side of the exchange: unless it `finished`, its drop (a return, an error or a panic)
/// leaves GONE in the line, so the other side stops at once.
struct Side<'a> {
    line: &'a AtomicU64,
    finished: bool,
    /// When the current batch began (the pinging side's).
    since: Instant,
}

impl<'a> Side<'a> {
    fn new(line: &'a AtomicU64) -> Side<'a> {
        Side {
            line,
            finished: false,
            since: Instant::now(),
        }
    }
}

impl Drop for Side<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.line.store(GONE, Ordering::Release);
        }
    }
}

/// The pairs of `allowed` CPUs worth probing on `topo`, each with what it spans: two
/// hardware threads of one core, two cores of the first NUMA node that has allowed CPUs,
/// and the first allowed CPUs of that node and of each other node; where the layout names
/// none of these, the first two allowed CPUs.
pub fn pairs(topo: &Topology, allowed: &CpuSet) -> Vec<(u32, u32, String)> {
    let mut out = Vec::new();
    let usable = |set: &CpuSet| set.intersection(allowed);
    if let Some(core) = topo.cores.iter().find(|c| usable(&c.cpus).len() >= 2) {
        let ids = usable(&core.cpus);
        out.push((
            ids.ids()[0],
            ids.ids()[1],
            "two threads of one core".to_string(),
        ));
    }
    let first_of = |set: &CpuSet| usable(set).ids().first().copied();
    let mut nodes = topo.numa.iter().filter(|n| first_of(&n.cpus).is_some());
    if let Some(first) = nodes.next() {
        let mut cores = topo
            .cores
            .iter()
            .filter_map(|c| first_of(&c.cpus.intersection(&first.cpus)));
        if let (Some(x), Some(y)) = (cores.next(), cores.next()) {
            out.push((x, y, format!("two cores of NUMA node {}", first.os_index)));
        }
        let x = first_of(&first.cpus).expect("filtered");
        for other in nodes {
            let y = first_of(&other.cpus).expect("filtered");
            out.push((
                x,
                y,
                format!("NUMA nodes {} and {}", first.os_index, other.os_index),
            ));
        }
    }
    // A layout that names neither cores nor nodes (some containers' sysfs): any two CPUs.
    if let ([x, y, ..], true) = (allowed.ids(), out.is_empty()) {
        out.push((*x, *y, "two CPUs".to_string()));
    }
    out
}

/// What a side that stopped early (failed, or out of time) leaves in the line.
const GONE: u64 = u64::MAX;

/// How an error says the other side stopped.
const GONE_WORDS: &str = "the other side stopped";

/// Binds the calling thread to `cpu` alone.
fn pin(cpu: u32) -> Result<(), String> {
    bind::apply(&Placement {
        local_rank: 0,
        numa: None,
        memory: None,
        cpus: CpuSet::of([cpu]),
        bind: true,
        device: None,
        notes: Vec::new(),
    })
}

/// Why a side stopped.
enum Stop {
    /// Past the deadline.
    Late,
    /// The other side stopped early.
    Gone,
}

/// Spins (reading) until `line` holds `want`, then makes it `want + 1`.
fn pass(line: &AtomicU64, want: u64, deadline: Instant) -> Result<(), Stop> {
    let mut spins = 0u32;
    loop {
        match line.load(Ordering::Acquire) {
            GONE => return Err(Stop::Gone),
            v if v == want => {
                // The other side waits for `want + 1` now, reading: this is the only
                // write, unless it fails meanwhile (then GONE stays).
                return match line.compare_exchange(
                    want,
                    want + 1,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => Ok(()),
                    Err(_) => Err(Stop::Gone),
                };
            }
            _ => {}
        }
        spins = spins.wrapping_add(1);
        if spins % CLOCK_EVERY == 0 && Instant::now() >= deadline {
            return Err(Stop::Late);
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first two CPUs this process may run on, if it may run on two.
    fn two_cpus() -> Option<(u32, u32)> {
        let mine = bind::current_affinity().ok()?;
        match mine.ids() {
            [a, b, ..] => Some((*a, *b)),
            _ => None,
        }
    }

    #[test]
    fn two_cpus_hand_a_line_back_and_forth_in_a_measured_time() {
        let Some((a, b)) = two_cpus() else {
            eprintln!("one CPU: nothing to measure");
            return;
        };
        let t = line_round_trip(a, b, Duration::from_secs(10)).expect("probe");
        // A round trip is at least two cache-line transfers. How long it takes is the
        // hardware's (and, on a loaded machine, the scheduler's): measured by
        // `rcoll-bench topo`, not bounded here.
        assert!(t > Duration::from_nanos(5), "CPU {a} <-> {b}: {t:?}");
    }

    #[test]
    fn pairs_span_a_core_two_cores_and_the_nodes() {
        use super::super::{Core, NumaNode};
        // Two nodes of two cores of two threads: CPUs 0-3 on node 0 (cores 0+1, 2+3),
        // 4-7 on node 1.
        let topo = Topology {
            source: "test".into(),
            packages: Vec::new(),
            numa: (0..2)
                .map(|n| NumaNode {
                    os_index: n,
                    cpus: CpuSet::of(4 * n..4 * n + 4),
                    near: CpuSet::new(),
                    memory: None,
                })
                .collect(),
            cores: (0..4)
                .map(|c| Core {
                    package: 0,
                    cpus: CpuSet::of([2 * c, 2 * c + 1]),
                })
                .collect(),
            devices: Vec::new(),
        };
        let all = CpuSet::of(0..8);
        let got: Vec<(u32, u32)> = pairs(&topo, &all).iter().map(|p| (p.0, p.1)).collect();
        assert_eq!(got, vec![(0, 1), (0, 2), (0, 4)]);
        // Only one thread of each core allowed: no core pair; node 1 starts at CPU 5.
        let odd = CpuSet::of([1, 3, 5, 7]);
        let got: Vec<(u32, u32, String)> = pairs(&topo, &odd);
        assert_eq!(
            got,
            vec![
                (1, 3, "two cores of NUMA node 0".to_string()),
                (1, 5, "NUMA nodes 0 and 1".to_string())
            ]
        );
        // One CPU: nothing to pair.
        assert!(pairs(&topo, &CpuSet::of([6])).is_empty());
        // No cores or nodes known: still two of the allowed CPUs.
        let bare = Topology {
            numa: Vec::new(),
            cores: Vec::new(),
            ..topo
        };
        assert_eq!(
            pairs(&bare, &CpuSet::of([2, 5, 7])),
            vec![(2, 5, "two CPUs".to_string())]
        );
    }

    #[test]
    fn one_cpu_or_one_outside_the_machine_is_an_error_naming_it() {
        let e = line_round_trip(3, 3, Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("CPU 3 with itself"), "{e}");
        // Far past any CPU this machine has: the binding fails, and the waiting thread
        // is released rather than left to its deadline.
        let start = Instant::now();
        let e = line_round_trip(0, 1000, Duration::from_secs(20)).unwrap_err();
        assert!(e.contains("1000"), "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
    }
}
