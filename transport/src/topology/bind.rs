//! Applying a [`Placement`]: the calling thread onto its CPUs and its memory policy to the
//! node of its memory (`preferred`: pages go there while it has room, then elsewhere). Threads it starts afterwards
//! inherit both, so the slots and buffers a transport allocates afterwards are local, and
//! threads the application had already placed keep their own placement.
//!
//! The CPU affinity goes through `nix`; the memory policy is one system call
//! (`set_mempolicy`), the only `unsafe` here.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet as NixSet};
use nix::unistd::Pid;

use super::{CpuSet, Placement};

/// The calling thread's CPU affinity.
pub fn current_affinity() -> Result<CpuSet, String> {
    let set = sched_getaffinity(Pid::from_raw(0)).map_err(|e| format!("sched_getaffinity: {e}"))?;
    Ok(CpuSet::of(
        (0..NixSet::count() as u32).filter(|&c| set.is_set(c as usize).unwrap_or(false)),
    ))
}

/// The CPU affinity a launcher gave this process (mpirun's `--bind-to`, srun's
/// `--cpu-bind`, `taskset`): the current one when it is a strict subset of the machine's
/// online CPUs, else the empty set (nothing to respect), as [`super::place()`] takes it.
/// Read once, at the first call (before rcoll binds the rank: its own binding is not the
/// launcher's).
pub fn launcher_affinity() -> CpuSet {
    static FIRST: std::sync::OnceLock<CpuSet> = std::sync::OnceLock::new();
    FIRST.get_or_init(read_launcher_affinity).clone()
}

fn read_launcher_affinity() -> CpuSet {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| CpuSet::parse_list(&s).ok());
    match (current_affinity(), online) {
        (Ok(mine), Some(online)) if !online.is_subset(&mine) => mine,
        _ => CpuSet::new(),
    }
}

/// Binds as `p` says (nothing when `p.bind` is false).
pub fn apply(p: &Placement) -> Result<(), String> {
    if !p.bind {
        return Ok(());
    }
    let mut set = NixSet::new();
    for &c in p.cpus.ids() {
        set.set(c as usize)
            .map_err(|e| format!("CPU {c} is beyond what sched_setaffinity takes: {e}"))?;
    }
    // The calling thread only: threads it starts afterwards (the progress thread, the
    // application's workers) inherit it, and threads the application placed already keep
    // their own placement.
    sched_setaffinity(Pid::from_raw(0), &set)
        .map_err(|e| format!("sched_setaffinity({}): {e}", p.cpus))?;
    if let Some(node) = p.memory {
        prefer_node(node)?;
    }
    Ok(())
}

/// `set_mempolicy(MPOL_PREFERRED, {node})` for the calling thread.
fn prefer_node(node: u32) -> Result<(), String> {
    const MPOL_PREFERRED: libc::c_long = 1;
    let bits = 8 * std::mem::size_of::<libc::c_ulong>();
    let mut mask = vec![0 as libc::c_ulong; node as usize / bits + 1];
    mask[node as usize / bits] |= 1 << (node as usize % bits);
    let maxnode = (mask.len() * bits) as libc::c_ulong;
    // SAFETY: set_mempolicy reads `maxnode` bits from `mask`, which holds exactly that many
    // and lives across the call; it changes only this thread's policy, no memory of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            MPOL_PREFERRED,
            mask.as_ptr(),
            maxnode,
        )
    };
    if r != 0 {
        return Err(format!(
            "set_mempolicy(preferred, node {node}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's CPUs as the kernel reports them in /proc (not through the
    /// sched_getaffinity this module binds with).
    fn cpus_in_proc() -> CpuSet {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("Cpus_allowed_list in /proc/thread-self/status");
        CpuSet::parse_list(list.trim()).unwrap()
    }

    /// Binding narrows the calling thread to the placement's CPUs (one of those it had),
    /// as /proc reads it back, and leaves the other threads alone; an unbound placement
    /// changes nothing; a node that does not exist is refused by set_mempolicy.
    #[test]
    fn binding_narrows_the_calling_thread_to_its_cpus() {
        let mine = current_affinity().unwrap();
        assert_eq!(cpus_in_proc(), mine);
        let last = *mine.ids().last().expect("a CPU");
        let one = CpuSet::of([last]);
        let p = Placement {
            local_rank: 0,
            numa: Some(0),
            memory: Some(0),
            cpus: one.clone(),
            bind: true,
            device: None,
            notes: vec![],
        };
        // On a thread of its own: the binding is the calling thread's, not the test's.
        let (seen, unbound) = std::thread::scope(|s| {
            s.spawn(|| {
                apply(&Placement {
                    bind: false,
                    ..p.clone()
                })
                .unwrap();
                let unbound = cpus_in_proc();
                apply(&p).unwrap();
                (cpus_in_proc(), unbound)
            })
            .join()
            .unwrap()
        });
        assert_eq!(unbound, mine, "an unbound placement changed the affinity");
        assert_eq!(seen, one, "bound to {one}, the kernel says {seen}");
        assert_eq!(
            cpus_in_proc(),
            mine,
            "another thread's binding moved this one"
        );
        let far = Placement {
            memory: Some(4095),
            ..p
        };
        let refused = std::thread::spawn(move || apply(&far)).join().unwrap();
        assert!(refused.unwrap_err().contains("set_mempolicy"));
    }
}
