//! Every rank a thread of this process, connected by rcoll's in-process transport
//! (`--transport local`).

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::BenchError;
use crate::report::SizeReport;
use crate::run::run_rank;
use crate::spec::BenchSpec;

/// Runs `spec` on `spec.nranks` threads. Rank 0's thread passes the header and the rows
/// to `print`; returns rank 0's reports, or every failing rank's error.
pub fn run(
    spec: &BenchSpec,
    print: impl FnMut(&str) + Send,
) -> Result<Vec<SizeReport>, BenchError> {
    if !spec.devices.is_empty() {
        return Err(crate::error::usage(format!(
            "--device {}: ranks as threads use no network device; use --transport tcp",
            spec.devices.join(",")
        )));
    }
    let comms = rcoll::local::Builder::new(spec.nranks)
        .algorithm(spec.algorithm)
        .build()?;
    let mut print = Some(print);
    let outcomes: Vec<Result<Vec<SizeReport>, BenchError>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|mut comm| {
                let mut sink = if comm.rank() == 0 { print.take() } else { None };
                s.spawn(move || {
                    let mut print = |text: &str| {
                        if let Some(f) = sink.as_mut() {
                            f(text);
                        }
                    };
                    let outcome =
                        catch_unwind(AssertUnwindSafe(|| run_rank(&mut comm, spec, &mut print)));
                    // Whatever went wrong here, the other ranks must not wait for this one
                    // until their timeout.
                    match outcome {
                        Ok(Ok(reports)) => Ok(reports),
                        Ok(Err(e)) => {
                            comm.abort(&e.to_string());
                            Err(e)
                        }
                        Err(_) => {
                            comm.abort("benchmark thread panicked");
                            Err(BenchError::Panicked)
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(BenchError::Panicked)))
            .collect()
    });
    let mut failures = Vec::new();
    let mut rank0 = Vec::new();
    for (rank, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(reports) if rank == 0 => rank0 = reports,
            Ok(_) => {}
            Err(BenchError::Rcoll(e)) => failures.push(e.to_string()),
            Err(e) => failures.push(format!("rank {rank}: {e}")),
        }
    }
    if failures.is_empty() {
        Ok(rank0)
    } else {
        Err(BenchError::Ranks(failures))
    }
}
