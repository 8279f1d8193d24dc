//! `rcoll-bench`: an nccl-tests-style bus-bandwidth benchmark for rcoll, and a planner that
//! prices and verifies every algorithm's schedules without moving data.
//!
//! ```text
//! rcoll-bench all_reduce --ranks 4 -b 8 -e 64M -f 2 -c 1     # 4 processes, shared memory
//! mpirun -np 4 -x RCOLL_UNIQUE_ID rcoll-bench all_reduce     # the launcher's 4 ranks
//! rcoll-bench all_reduce --ranks 4 --transport local         # 4 threads
//! rcoll-bench plan all_reduce --ranks 5 --bytes 5000000
//! rcoll-bench all_reduce --ranks 4 -J tcp.json --plot tcp.png  # and a busbw chart
//! rcoll-bench plot tcp.json local.json -o both.png             # one line per file
//! rcoll-bench all_reduce --transport verbs --device veth0,veth1  # RDMA, ranks on 2 NICs
//! rcoll-bench doctor                                           # can verbs work here?
//! rcoll-bench simulate all_reduce --plot scale.png              # 2..65,536 ranks, priced
//! rcoll-bench all_reduce --ranks 4 --algo all                  # every algorithm, auto's regret
//! rcoll-bench calibrate -o tuning.json && export RCOLL_TUNING_FILE=tuning.json
//! ```
#![forbid(unsafe_code)]

mod args;
mod busbw;
mod calibrate;
mod call;
mod compare;
mod data;
mod doctor;
mod error;
mod hosts;
mod launch;
mod output;
mod plan;
mod plot;
mod progress;
mod rank;
mod report;
mod run;
mod simulate;
mod spawn;
mod spec;
mod sweep;
mod threads;
mod topo;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{BenchArgs, Cli, Command, PlanArgs, TransportFlag};
use crate::error::BenchError;
use crate::launch::Mode;
use crate::output::print;
use crate::progress::Progress;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Plan(args)) => plan(args),
        Some(Command::Plot(args)) => plot::files_chart(&args),
        Some(Command::Doctor(args)) => return doctor::run(&args),
        Some(Command::Topo(args)) => topo::run(&args),
        Some(Command::Simulate(args)) => simulate::run(args),
        Some(Command::Calibrate(args)) => calibrate::run(args),
        Some(Command::DoctorRank) => doctor::connect::rank(),
        None => bench(cli.bench),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rcoll-bench: {e}");
            match e {
                BenchError::Usage(_) => ExitCode::from(2),
                BenchError::Processes { code, .. } => ExitCode::from(code),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// `rcoll-bench plan ...`.
fn plan(args: PlanArgs) -> Result<(), BenchError> {
    let json = args.json;
    let spec = args.into_spec()?;
    let plan = plan::plan(&spec)?;
    if json {
        print(&format!("{}\n", plan::render_json(&plan)?));
    } else {
        print(&plan::render_text(&spec, &plan));
    }
    Ok(())
}

/// `rcoll-bench <collective> ...`.
fn bench(args: BenchArgs) -> Result<(), BenchError> {
    let (launch, spec) = args.into_spec()?;
    match launch::mode(&launch, &|name| std::env::var(name).ok())? {
        Mode::Threads(nranks) => {
            let spec = spec.with_ranks(nranks)?;
            let json = output::open(&spec)?;
            let mut progress = Progress::on_terminal(&spec.sizes);
            let reports = threads::run(&spec, |text: &str| match progress.as_mut() {
                Some(p) => p.print(text),
                None => print(text),
            })?;
            output::conclude(&spec, &reports, json)
        }
        Mode::Spawn(nranks) => {
            // Every check the ranks would make, made once here before anything starts.
            let spec = spec.with_ranks(nranks)?;
            rcoll::Config::from_env()?;
            if launch.transport == Some(TransportFlag::Verbs) {
                doctor::verbs_precheck().map_err(BenchError::NoVerbs)?;
            }
            output::open(&spec)?;
            spawn::run(
                nranks,
                launch.stall_timeout,
                Progress::on_terminal(&spec.sizes),
            )
        }
        Mode::Rank { size, spawned } => {
            // The same checks before joining, where the launcher states the size.
            if let Some(n) = size {
                spec.clone().with_ranks(n)?;
            }
            rank::run(&launch, spec, spawned)
        }
    }
}
