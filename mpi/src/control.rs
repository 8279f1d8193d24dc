//! The environment's say: `RCOLL_MPI=0` forwards everything, `RCOLL_MPI_COLLS` names the
//! collectives served (the others go to MPI), `RCOLL_MPI_SHM_MIN` the smallest call served
//! inside one host, `RCOLL_MPI_STATS=1` prints what was served and forwarded at
//! `MPI_Finalize`.

use crate::decide::Coll;

/// The smallest blocking call (its count times its element's size: a reduction's vector, a
/// reduce-scatter's or a movement's block per rank) served inside one host under Open MPI
/// unless `RCOLL_MPI_SHM_MIN` says otherwise. Below it the MPI library's own shared memory answers sooner: one copy
/// through a cell its peer polls, where a call through rcoll is decided, planned and run
/// by its engine (docs in mpi/README.md give the crossover measured per collective). Under
/// another MPI library every size is served by default: its crossover was not measured,
/// and MPICH 4.0.2 as Debian builds it reduces `MPI_UINT8_T` with `MPI_MIN` and `MPI_MAX`
/// wrongly above 127, which rcoll does not.
pub const SHM_MIN: usize = 2048;

/// What the environment asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    /// `RCOLL_MPI` is not 0.
    pub enabled: bool,
    /// `RCOLL_MPI_COLLS`, indexed like [`Coll::ALL`] (all true when unset).
    pub served: [bool; Coll::ALL.len()],
    /// `RCOLL_MPI_SHM_MIN`: on a communicator inside one host (rcoll's shared memory to
    /// every member), blocking calls of fewer bytes go to MPI (when unset, [`SHM_MIN`]
    /// under Open MPI, else 0: none).
    pub shm_min: usize,
    /// `RCOLL_MPI_STATS=1`.
    pub stats: bool,
    /// Problems with the settings, to print once.
    pub warnings: Vec<String>,
}

impl Control {
    /// From the process environment, and the MPI library the shim was built for.
    pub fn from_env() -> Control {
        let var = |k: &str| std::env::var(k).ok();
        // SAFETY: returns a constant of the build.
        let open_mpi = unsafe { crate::ffi::rcoll_mpi_is_open_mpi() } != 0;
        Control::parse(
            var("RCOLL_MPI").as_deref(),
            var("RCOLL_MPI_COLLS").as_deref(),
            (
                var("RCOLL_MPI_SHM_MIN").as_deref(),
                if open_mpi { SHM_MIN } else { 0 },
            ),
            var("RCOLL_MPI_STATS").as_deref(),
        )
    }

    /// From the four variables' values (`RCOLL_MPI_SHM_MIN`'s with its default).
    pub fn parse(
        enabled: Option<&str>,
        colls: Option<&str>,
        (shm_min, shm_default): (Option<&str>, usize),
        stats: Option<&str>,
    ) -> Control {
        let mut warnings = Vec::new();
        let mut flag = |name: &str, v: Option<&str>, default: bool| match v.map(str::trim) {
            None | Some("") => default,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "on" | "yes" | "true" => true,
                "0" | "off" | "no" | "false" => false,
                _ => {
                    warnings.push(format!(
                        "{name}={v:?} is not 0 or 1: taken as {}",
                        u8::from(default)
                    ));
                    default
                }
            },
        };
        let enabled = flag("RCOLL_MPI", enabled, true);
        let stats = flag("RCOLL_MPI_STATS", stats, false);
        let shm_min = match shm_min.map(str::trim) {
            None | Some("") => shm_default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                warnings.push(format!(
                    "RCOLL_MPI_SHM_MIN={v:?} is not a number of bytes: taken as {shm_default}"
                ));
                shm_default
            }),
        };
        let mut served = [colls.is_none(); Coll::ALL.len()];
        for word in colls.unwrap_or_default().split(',').map(str::trim) {
            if word.is_empty() {
                continue;
            }
            let key = word.to_ascii_lowercase();
            let key = key.strip_prefix("mpi_").unwrap_or(&key);
            match Coll::ALL.iter().find(|c| c.key() == key) {
                Some(c) => served[c.index()] = true,
                None => warnings.push(format!(
                    "RCOLL_MPI_COLLS: no collective {word:?} (expected some of {})",
                    Coll::ALL
                        .iter()
                        .filter(|c| c.servable())
                        .map(|c| c.key())
                        .collect::<Vec<_>>()
                        .join(",")
                )),
            }
        }
        Control {
            enabled,
            served,
            shm_min,
            stats,
            warnings,
        }
    }

    /// Whether `coll` may be served.
    pub fn serves(&self, coll: Coll) -> bool {
        self.served[coll.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_serves_everything_without_stats() {
        let c = Control::parse(None, None, (None, SHM_MIN), None);
        assert!(c.enabled && !c.stats && c.warnings.is_empty());
        assert_eq!(c.shm_min, SHM_MIN);
        assert!(Coll::ALL.iter().all(|&k| c.serves(k)));
    }

    #[test]
    fn rcoll_mpi_0_forwards_and_stats_1_counts() {
        let c = Control::parse(Some("0"), None, (None, SHM_MIN), Some("1"));
        assert!(!c.enabled && c.stats);
        let c = Control::parse(Some("maybe"), None, (None, SHM_MIN), None);
        assert!(c.enabled);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    }

    #[test]
    fn colls_restricts_by_name_in_either_spelling() {
        let c = Control::parse(
            None,
            Some("allreduce, MPI_Bcast,reduce_scatter_block,"),
            (None, SHM_MIN),
            None,
        );
        assert!(c.serves(Coll::Allreduce) && c.serves(Coll::Bcast));
        assert!(c.serves(Coll::ReduceScatterBlock) && !c.serves(Coll::ReduceScatter));
        assert!(!c.serves(Coll::Barrier));
        assert!(c.warnings.is_empty());
        let c = Control::parse(None, Some("allreduse"), (None, SHM_MIN), None);
        assert!(!c.serves(Coll::Allreduce));
        assert!(c.warnings[0].contains("\"allreduse\""), "{:?}", c.warnings);
    }

    #[test]
    fn shm_min_is_bytes_0_serves_every_size_and_unset_is_the_librarys_default() {
        let shm = |v, default| Control::parse(None, None, (v, default), None);
        assert_eq!(shm(Some("0"), SHM_MIN).shm_min, 0);
        assert_eq!(shm(Some(" 65536 "), 0).shm_min, 65536);
        assert_eq!(shm(Some(""), 0).shm_min, 0);
        assert_eq!(shm(None, SHM_MIN).shm_min, SHM_MIN);
        let c = shm(Some("2K"), SHM_MIN);
        assert_eq!(c.shm_min, SHM_MIN);
        assert!(
            c.warnings[0].contains("RCOLL_MPI_SHM_MIN=\"2K\""),
            "{:?}",
            c.warnings
        );
    }
}
