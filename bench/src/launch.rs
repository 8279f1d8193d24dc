//! How ranks are launched, decided from the flags and the environment:
//!
//! | situation | mode |
//! |---|---|
//! | `--transport local` | every rank a thread of this process ([`crate::threads`]) |
//! | started by rcoll-bench itself ([`CHILD_MARKER`] set) | this process is one rank ([`crate::rank`]) |
//! | under a launcher (mpirun, srun, torchrun, `RCOLL_RANK`) | this process is one rank |
//! | `--ranks N` or `--transport tcp/auto` | start N processes of this binary ([`crate::spawn`]) |
//! | none of these | two ranks as threads, as before processes existed |
//!
//! Every mode runs the same per-rank code, [`crate::run::run_rank`].

use rcoll::transport::launcher::LAUNCHERS;

use crate::args::{LaunchArgs, TransportFlag, DEFAULT_RANKS};
use crate::error::{usage, BenchError};

/// Set (to the parent's pid) in the processes rcoll-bench starts, so that they run as one
/// rank each instead of starting processes themselves.
pub const CHILD_MARKER: &str = "RCOLL_BENCH_PARENT_PID";

/// What this process does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Runs this many ranks as threads.
    Threads(usize),
    /// Starts this many rank processes and waits for them.
    Spawn(usize),
    /// Is one rank of a process group; `size` is the group's size if the environment
    /// states it readably, `spawned` whether rcoll-bench started this process.
    Rank {
        /// The group's size, from the launcher's variable.
        size: Option<usize>,
        /// Started by a parent rcoll-bench.
        spawned: bool,
    },
}

/// The launcher whose rank and size variables are set, by `var`: its name, its size
/// variable, and that variable's value.
fn launcher(var: &dyn Fn(&str) -> Option<String>) -> Option<(&'static str, &'static str, String)> {
    LAUNCHERS.into_iter().find_map(|(name, rank, size)| {
        var(rank)?;
        var(size).map(|value| (name, size, value))
    })
}

/// Decides the mode from the flags and the variables `var` reads (the environment).
pub fn mode(args: &LaunchArgs, var: &dyn Fn(&str) -> Option<String>) -> Result<Mode, BenchError> {
    if args.transport == Some(TransportFlag::Local) {
        if var(CHILD_MARKER).is_some() {
            return Err(usage("a rank process cannot run --transport local"));
        }
        return Ok(Mode::Threads(args.ranks.unwrap_or(DEFAULT_RANKS)));
    }
    let spawned = var(CHILD_MARKER).is_some();
    if let Some((name, size_var, value)) = launcher(var) {
        let size = value.trim().parse::<usize>().ok();
        if let (Some(asked), Some(size)) = (args.ranks, size) {
            if asked != size {
                return Err(usage(format!(
                    "running under {name} with {size_var}={size}, but --ranks {asked} asks \
                     for {asked} ranks: leave out --ranks to use the launcher's ranks, or \
                     unset the launcher's variables to let rcoll-bench start its own"
                )));
            }
        }
        return Ok(Mode::Rank { size, spawned });
    }
    if spawned {
        return Err(usage(format!(
            "{CHILD_MARKER} is set but RCOLL_RANK and RCOLL_WORLD_SIZE are not"
        )));
    }
    match (args.ranks, args.transport) {
        (Some(n), _) => Ok(Mode::Spawn(n)),
        (None, Some(_)) => Ok(Mode::Spawn(DEFAULT_RANKS)),
        (None, None) => Ok(Mode::Threads(DEFAULT_RANKS)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn decide(
        ranks: Option<usize>,
        transport: Option<TransportFlag>,
        env: &[(&str, &str)],
    ) -> Result<Mode, BenchError> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let args = LaunchArgs {
            ranks,
            transport,
            stall_timeout: None,
        };
        mode(&args, &|name| env.get(name).cloned())
    }

    #[test]
    fn flags_and_environment_choose_the_mode() {
        use TransportFlag::{Auto, Local, Tcp};
        assert_eq!(decide(None, None, &[]).ok(), Some(Mode::Threads(2)));
        assert_eq!(
            decide(Some(4), Some(Local), &[]).ok(),
            Some(Mode::Threads(4))
        );
        assert_eq!(decide(Some(4), None, &[]).ok(), Some(Mode::Spawn(4)));
        assert_eq!(decide(None, Some(Tcp), &[]).ok(), Some(Mode::Spawn(2)));
        assert_eq!(decide(Some(3), Some(Auto), &[]).ok(), Some(Mode::Spawn(3)));
        let mpi = [("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "4")];
        let rank = Some(Mode::Rank {
            size: Some(4),
            spawned: false,
        });
        assert_eq!(decide(None, None, &mpi).ok(), rank);
        assert_eq!(decide(Some(4), Some(Tcp), &mpi).ok(), rank);
        assert!(decide(Some(2), None, &mpi).is_err());
        assert_eq!(decide(None, Some(Local), &mpi).ok(), Some(Mode::Threads(2)));
        let child = [
            ("RCOLL_RANK", "2"),
            ("RCOLL_WORLD_SIZE", "3"),
            (CHILD_MARKER, "99"),
        ];
        assert_eq!(
            decide(Some(3), None, &child).ok(),
            Some(Mode::Rank {
                size: Some(3),
                spawned: true
            })
        );
        assert!(decide(Some(3), None, &[(CHILD_MARKER, "99")]).is_err());
    }
}
