//! Counts of served and forwarded calls per MPI collective, and why each was forwarded;
//! printed at `MPI_Finalize` (`RCOLL_MPI_STATS=1`) as
//! `rcoll-mpi: MPI_Allreduce: 1234 served, 5 forwarded (3 MPI_MAXLOC, 2 derived datatype)`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::decide::{Coll, Reason};

/// The counts of one process.
pub struct Stats {
    /// Served calls, indexed like [`Coll::ALL`]; only counted (relaxed: read at the end).
    served: [AtomicU64; Coll::ALL.len()],
    /// Forwarded calls per collective and reason, in the order first seen: a few entries,
    /// found by comparing reasons (a call counted makes no text and allocates nothing).
    forwarded: Mutex<Vec<(usize, Reason, u64)>>,
}

impl Stats {
    /// No calls yet.
    pub const fn new() -> Stats {
        Stats {
            served: [const { AtomicU64::new(0) }; Coll::ALL.len()],
            forwarded: Mutex::new(Vec::new()),
        }
    }

    /// One call of `coll` served.
    pub fn served(&self, coll: Coll) {
        self.served[coll.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// One call of `coll` forwarded for `reason`.
    pub fn forwarded(&self, coll: Coll, reason: &Reason) {
        let i = coll.index();
        let mut seen = self.forwarded.lock().unwrap_or_else(|p| p.into_inner());
        match seen.iter_mut().find(|(c, r, _)| *c == i && r == reason) {
            Some((_, _, n)) => *n += 1,
            None => seen.push((i, reason.clone(), 1)),
        }
    }

    /// One line per collective called, in [`Coll::ALL`]'s order; reasons by count, most
    /// first (then by name).
    pub fn lines(&self) -> Vec<String> {
        let mut map: BTreeMap<(usize, String), u64> = BTreeMap::new();
        for (c, r, n) in self
            .forwarded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            *map.entry((*c, r.to_string())).or_default() += n;
        }
        let mut lines = Vec::new();
        for coll in Coll::ALL {
            let i = coll.index();
            let served = self.served[i].load(Ordering::Relaxed);
            let mut reasons: Vec<(&str, u64)> = map
                .iter()
                .filter(|((c, _), _)| *c == i)
                .map(|((_, r), n)| (r.as_str(), *n))
                .collect();
            reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let forwarded: u64 = reasons.iter().map(|r| r.1).sum();
            if served + forwarded == 0 {
                continue;
            }
            let mut line = format!(
                "rcoll-mpi: {}: {served} served, {forwarded} forwarded",
                coll.mpi_name()
            );
            if !reasons.is_empty() {
                let why: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
                line += &format!(" ({})", why.join(", "));
            }
            lines.push(line);
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_collective_called_in_the_documented_form() {
        let s = Stats::new();
        assert!(s.lines().is_empty());
        for _ in 0..1234 {
            s.served(Coll::Allreduce);
        }
        for _ in 0..2 {
            s.forwarded(Coll::Allreduce, &Reason::DerivedDatatype);
        }
        for _ in 0..3 {
            s.forwarded(Coll::Allreduce, &Reason::Op("MPI_MAXLOC"));
        }
        s.served(Coll::Barrier);
        s.forwarded(Coll::Allgatherv, &Reason::NotServed);
        assert_eq!(
            s.lines(),
            [
                "rcoll-mpi: MPI_Allreduce: 1234 served, 5 forwarded (3 MPI_MAXLOC, 2 derived datatype)",
                "rcoll-mpi: MPI_Barrier: 1 served, 0 forwarded",
                "rcoll-mpi: MPI_Allgatherv: 0 served, 1 forwarded (1 not served by rcoll)",
            ]
        );
    }
}
