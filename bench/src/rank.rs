//! This process is one rank of a process group, started by rcoll-bench itself
//! ([`crate::spawn`]) or by a launcher (mpirun, srun, torchrun, or by hand with
//! `RCOLL_RANK`, `RCOLL_WORLD_SIZE` and `RCOLL_ROOT_ADDR`): it joins through
//! [`rcoll::process::Builder::from_env`], runs [`run_rank`], and rank 0 reports.

use std::io::Read as _;

use rcoll::process::TransportKind;

use crate::args::{LaunchArgs, TransportFlag};
use crate::error::{usage, BenchError};
use crate::output;
use crate::progress::Progress;
use crate::run::run_rank;
use crate::spec::BenchSpec;

/// Exit status of a rank whose parent rcoll-bench went away.
const ORPHANED: i32 = 3;

/// Joins the group and runs `spec` as this process's rank. `spawned`: started by a parent
/// rcoll-bench, which this process must not outlive.
pub fn run(launch: &LaunchArgs, spec: BenchSpec, spawned: bool) -> Result<(), BenchError> {
    if spawned {
        watch_parent();
    }
    let mut builder = rcoll::process::Builder::from_env()?.algorithm(spec.algorithm);
    if !spec.devices.is_empty() {
        if let Some(device) = spec.device_of(own_rank()?) {
            builder = builder.interface(device)?;
        }
    }
    // Without the flag, RCOLL_TRANSPORT (read by from_env) or rcoll's default decides.
    match launch.transport {
        Some(TransportFlag::Tcp) => builder = builder.transport(TransportKind::Tcp),
        Some(TransportFlag::Verbs) => builder = builder.transport(TransportKind::Verbs),
        Some(TransportFlag::Shm) => builder = builder.transport(TransportKind::Shm),
        Some(TransportFlag::Auto) => builder = builder.transport(TransportKind::Auto),
        Some(TransportFlag::Local) | None => {}
    }
    let mut comm = builder.build()?;
    let rank = comm.rank();
    let run = |comm: &mut rcoll::Communicator| {
        let mut spec = spec.with_ranks(comm.size())?;
        spec.transport = comm.transport_name();
        spec.transport_details = comm.transport_details();
        if let Some(h) = comm.hosts().filter(|h| h.nhosts() > 1) {
            let order: Vec<String> = h.ring_order().iter().map(|r| r.0.to_string()).collect();
            spec.transport_details += &format!(
                "{}rings {}: {}, crossing hosts {} times a round",
                if spec.transport_details.is_empty() {
                    ""
                } else {
                    "; "
                },
                if h.ring_is_rank_order() {
                    "in rank order"
                } else {
                    "host by host"
                },
                order.join(" "),
                h.ring_crossings().0
            );
        }
        let json = if rank == 0 {
            output::open(&spec)?
        } else {
            None
        };
        // A spawned rank 0's parent relays the table and draws the progress line.
        let mut progress = (rank == 0 && !spawned)
            .then(|| Progress::on_terminal(&spec.sizes))
            .flatten();
        let mut print = |text: &str| match progress.as_mut() {
            Some(p) => p.print(text),
            None if rank == 0 => output::print(text),
            None => {}
        };
        let reports = run_rank(comm, &spec, &mut print)?;
        Ok::<_, BenchError>((spec, reports, json))
    };
    match run(&mut comm) {
        Ok((spec, reports, json)) if rank == 0 => output::conclude(&spec, &reports, json),
        Ok(_) => Ok(()),
        Err(e) => {
            // The other ranks must not wait for this one until their timeout.
            comm.abort(&e.to_string());
            Err(e)
        }
    }
}

/// This process's rank, as the launcher's variables state it (the ones
/// [`rcoll::process::Builder::from_env`] has just read), to pick its `--device` entry.
fn own_rank() -> Result<usize, BenchError> {
    match rcoll::transport::launcher::Placement::from_env() {
        Ok(Some(placement)) => Ok(placement.rank),
        Ok(None) => Err(usage(
            "no rank in the environment to choose a --device entry by",
        )),
        Err(e) => Err(usage(e)),
    }
}

/// Exits this process when its parent rcoll-bench is gone, however it went (even by
/// SIGKILL): the parent holds the write end of this process's stdin and never writes,
/// so end of file means that it has exited.
pub fn watch_parent() {
    std::thread::spawn(|| {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 64];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        std::process::exit(ORPHANED);
    });
}
