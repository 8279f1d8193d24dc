//! `rcoll-bench`: an nccl-tests-style bus-bandwidth benchmark for rcoll, and a planner that
//! prices and verifies every algorithm's schedules without moving data.
//!
//! ```text
//! rcoll-bench all_reduce --ranks 4 -b 8 -e 64M -f 2 -c 1
//! rcoll-bench plan all_reduce --ranks 5 --bytes 5000000
//! ```
#![forbid(unsafe_code)]

mod args;
mod busbw;
mod data;
mod error;
mod launch;
mod plan;
mod report;
mod run;
mod sweep;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;

use crate::args::{BenchArgs, Cli, Command, PlanArgs};
use crate::error::BenchError;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Plan(args)) => plan(args),
        None => bench(cli.bench),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rcoll-bench: {e}");
            match e {
                BenchError::Usage(_) => ExitCode::from(2),
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
    let spec = args.into_spec()?;
    // Open the JSON file first, so that a bad path fails before the run, not after it.
    let json_file = match &spec.json {
        Some(path) => Some((
            path,
            std::fs::File::create(path).map_err(|e| write_error(path, e))?,
        )),
        None => None,
    };
    print(&report::header(&spec));
    let reports = launch::run_local(&spec, |r| print(&format!("{}\n", report::row(r))))?;
    print(&report::footer(&spec, &reports));
    if let Some((path, mut file)) = json_file {
        let text = report::json(&reports)? + "\n";
        file.write_all(text.as_bytes())
            .map_err(|e| write_error(path, e))?;
    }
    match report::total_wrong(&reports) {
        0 => Ok(()),
        n => Err(BenchError::Wrong(n)),
    }
}

fn write_error(path: &std::path::Path, source: std::io::Error) -> BenchError {
    BenchError::Write {
        path: path.to_owned(),
        source,
    }
}

/// Writes to stdout, ignoring a closed pipe (`rcoll-bench ... | head`).
fn print(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes()).and_then(|()| out.flush());
}
