//! The algorithm of each level of a hierarchical schedule: which flat algorithms can run
//! a level ([`LEVEL_CANDIDATES`], [`LevelAlgorithms::effective`]); `auto` prices each level
//! at its own rates in [`crate::select::choose_levels`].

use super::sub_layout;
use crate::algorithm::Algorithm;
use crate::schedule::{Collective, Layout};

/// The flat algorithm of each level: `local` inside every host, `global` across hosts.
/// Each must use one channel, so that a phase's primitives can share one channel with
/// the phases around it ([`LEVEL_CANDIDATES`]). The default is the ring at both
/// levels; `Auto` prices each level with its own rates ([`crate::select::choose_levels`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LevelAlgorithms {
    /// Inside every host (shared memory).
    pub local: Algorithm,
    /// Across hosts, one rank per host (the network).
    pub global: Algorithm,
}

impl Default for LevelAlgorithms {
    fn default() -> Self {
        LevelAlgorithms {
            local: Algorithm::Ring,
            global: Algorithm::Ring,
        }
    }
}

impl std::fmt::Display for LevelAlgorithms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.local, self.global)
    }
}

impl std::str::FromStr for LevelAlgorithms {
    type Err = String;

    /// `local/global`, for example `mesh/ring` (`RCOLL_LEVEL_ALGO`).
    fn from_str(s: &str) -> Result<Self, String> {
        let (local, global) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not local/global (for example mesh/ring)"))?;
        let level = |name: &str| -> Result<Algorithm, String> {
            let a: Algorithm = name.trim().parse()?;
            if LEVEL_CANDIDATES.contains(&a) {
                Ok(a)
            } else {
                Err(format!(
                    "{a} cannot run a level (one of: {})",
                    LEVEL_CANDIDATES.map(Algorithm::name).join(", ")
                ))
            }
        };
        Ok(LevelAlgorithms {
            local: level(local)?,
            global: level(global)?,
        })
    }
}

impl LevelAlgorithms {
    /// What runs at each level of `collective`'s hierarchical schedule when these are
    /// asked for: a level's algorithm where it serves that level's sub-collectives (see
    /// `level_algorithm`), else the ring. For example `tree/tree` runs all_gather as
    /// `tree/ring` (across hosts only ring and mesh move one block per message), and
    /// `halving_doubling` never runs inside a host (it serves neither reduce nor
    /// broadcast).
    pub fn effective(self, collective: Collective) -> LevelAlgorithms {
        use Collective as C;
        let (locals, globals): (&[Collective], &[Collective]) = match collective {
            C::AllReduce => (&[C::Reduce, C::Broadcast], &[C::AllReduce]),
            C::Broadcast => (&[C::Broadcast], &[C::Broadcast]),
            C::Reduce => (&[C::Reduce], &[C::Reduce]),
            C::AllGather => (&[C::Broadcast], &[C::AllGather]),
            C::ReduceScatter => (&[C::Reduce], &[C::ReduceScatter]),
            _ => return self,
        };
        let at = |wanted: Algorithm, subs: &[Collective]| {
            let runs = |c: Collective| level_algorithm(wanted, &sub_layout(c, 2, 1, 0, false));
            if subs.iter().all(|&c| runs(c) == wanted) {
                wanted
            } else {
                Algorithm::Ring
            }
        };
        LevelAlgorithms {
            local: at(self.local, locals),
            global: at(self.global, globals),
        }
    }
}

/// The flat algorithms that can run a level: each schedules every collective a level
/// needs on one channel.
pub const LEVEL_CANDIDATES: [Algorithm; 6] = [
    Algorithm::Ring,
    Algorithm::Mesh,
    Algorithm::SingleRoot,
    Algorithm::Tree,
    Algorithm::BinomialTree,
    Algorithm::HalvingDoubling,
];

/// The algorithm that runs `sub` at a level asked to run `wanted`: `wanted` where it
/// serves the sub-collective (on one channel), else the ring. An all_gather or
/// reduce_scatter across hosts works on blocks that lie apart in the call's buffers (one
/// local rank's on every host), so only algorithms that move one block per message can
/// run it: ring and mesh for all_gather; the ring alone for reduce_scatter, whose output
/// on a rank alone on its host lies inside its input when the call is in place.
pub(crate) fn level_algorithm(wanted: Algorithm, sub: &Layout) -> Algorithm {
    let fits = match sub.collective {
        Collective::AllGather => matches!(wanted, Algorithm::Ring | Algorithm::Mesh),
        Collective::ReduceScatter => wanted == Algorithm::Ring,
        _ => true,
    };
    if LEVEL_CANDIDATES.contains(&wanted) && wanted.serves(sub.collective) && fits {
        wanted
    } else {
        Algorithm::Ring
    }
}
