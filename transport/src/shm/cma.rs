//! Single copy between processes of one host: reading a message straight out of its
//! sender's address space with `process_vm_readv` (Linux's "cross memory attach", which
//! Open MPI's shared-memory transport uses the same way). The kernel checks that this
//! process may read the other one (same user, and whatever Yama or a container's seccomp
//! policy allows); [`probe`] finds out at setup.

use std::io;

/// Reads `dst.len()` bytes at `addr` in process `pid` into `dst`.
pub fn read(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<()> {
    let mut done = 0usize;
    while done < dst.len() {
        let rest = &mut dst[done..];
        let local = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let remote = libc::iovec {
            iov_base: (addr as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: `local` covers `rest`, memory this function borrows mutably, so the
        // kernel writes nowhere else in this process; `remote` names memory of the other
        // process, which the kernel checks (EFAULT if it is not mapped there) and only
        // reads. Both vectors live across the call.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{} of {} bytes readable", done, dst.len()),
                ))
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Whether `pid` holds `expected` at `addr`: this process may read it, and the process
/// is the one that said so (it made `expected`, a random value, and told this rank over
/// the authenticated control connection).
pub fn probe(pid: i32, addr: u64, expected: &[u8]) -> Result<(), String> {
    let mut seen = vec![0u8; expected.len()];
    read(pid, addr, &mut seen).map_err(|e| format!("process_vm_readv: {e}"))?;
    if seen != expected {
        return Err(format!(
            "process {pid} does not hold the value it announced"
        ));
    }
    Ok(())
}
