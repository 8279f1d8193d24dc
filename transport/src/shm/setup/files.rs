//! The files of shared memory: this rank's segment and doorbell, made (anonymous, or in
//! the segment directory), and a peer's, opened only if they are what the peer says (one of
//! this job's, of this user, never through a link elsewhere). What is mapped and how
//! the rings work is `segment`'s; the exchange that announces these is `setup`'s.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::super::segment::{self, Segment, Shape};
use super::super::PREFIX;

/// Removes a segment's file when dropped.
pub(super) struct Unlink(pub(super) Vec<PathBuf>);

impl Drop for Unlink {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Where a segment or a bell is: the path peers open, and the file to unlink once they
/// have (none for an anonymous one).
pub(super) struct SegmentPath {
    pub(super) announced: String,
    pub(super) file: Option<PathBuf>,
}

pub(super) fn make_segment(
    dir: Option<&Path>,
    shape: Shape,
) -> std::io::Result<(File, SegmentPath, Arc<Segment>)> {
    let bytes = shape.bytes().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "segment too large")
    })?;
    let (file, path) = match dir {
        None => {
            let file = segment::memory_file(MEMFD_NAME)?;
            let announced = format!("/proc/{}/fd/{}", std::process::id(), file.as_raw_fd());
            (
                file,
                SegmentPath {
                    announced,
                    file: None,
                },
            )
        }
        Some(dir) => {
            let path = unique_path(dir, "")?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| {
                    std::io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))
                })?;
            let announced = path.display().to_string();
            (
                file,
                SegmentPath {
                    announced,
                    file: Some(path),
                },
            )
        }
    };
    let place = dir.map_or_else(|| "memory".to_owned(), |d| d.display().to_string());
    let made = (|| {
        file.set_len(bytes as u64)?;
        segment::allocate(&file, bytes).map_err(|e| {
            std::io::Error::new(e.kind(), format!("reserving {bytes} bytes in {place}: {e}"))
        })?;
        Segment::create(&file, shape)
    })();
    match made {
        Ok(seg) => Ok((file, path, Arc::new(seg))),
        Err(e) => {
            if let Some(p) = &path.file {
                let _ = std::fs::remove_file(p);
            }
            Err(e)
        }
    }
}

/// The name an anonymous segment shows in `/proc/<pid>/fd` (`/memfd:rcoll-segment`), which
/// a peer checks before mapping it.
pub(super) const MEMFD_NAME: &str = "rcoll-segment";

/// This rank's doorbell: a pipe its peers open through `/proc/<pid>/fd`, as they open an
/// anonymous segment; with a segment directory, a FIFO there (mode 0600), as the segment
/// is a file there. Opened read-write: the bell is then its own writer (never at end of
/// file while peers come and go) and non-blocking (a wait only takes what is there).
pub(super) fn make_bell(dir: Option<&Path>) -> std::io::Result<(File, SegmentPath)> {
    let open = |path: &Path, flags: i32| open_rw(path, libc::O_NONBLOCK | flags);
    let Some(dir) = dir else {
        let (r, _w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let bell = open(Path::new(&format!("/proc/self/fd/{}", r.as_raw_fd())), 0)?;
        let announced = format!("/proc/{}/fd/{}", std::process::id(), bell.as_raw_fd());
        return Ok((
            bell,
            SegmentPath {
                announced,
                file: None,
            },
        ));
    };
    let path = unique_path(dir, "bell-")?;
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| std::io::Error::other(format!("creating {}: {e}", path.display())))?;
    match open(&path, libc::O_NOFOLLOW) {
        Ok(bell) => Ok((
            bell,
            SegmentPath {
                announced: path.display().to_string(),
                file: Some(path),
            },
        )),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}

/// A new name in `dir` for a file of this rank's (`kind` after the job's prefix).
pub(super) fn unique_path(dir: &Path, kind: &str) -> std::io::Result<PathBuf> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(dir.join(format!(
        "{PREFIX}{kind}{}-{:016x}",
        std::process::id(),
        u64::from_le_bytes(random)
    )))
}

/// Opens the bell a peer announced: a pipe as `/proc/<pid>/fd/<fd>`, or with a segment
/// directory a FIFO of this user there. Read-write, as the peer opened it: a ring to a
/// peer that has died finds a reader still (this rank) and fills the pipe instead of
/// raising SIGPIPE, which would end a C program that keeps the default action.
pub(in crate::shm) fn open_bell(dir: Option<&Path>, announced: &str) -> Result<File, String> {
    let (bell, path) = match dir {
        None => open_peer_fd(
            announced,
            "a bell",
            |target| target.to_string_lossy().starts_with("pipe:["),
            libc::O_NONBLOCK,
        )?,
        Some(dir) => open_in_dir(dir, announced, "a bell", libc::O_NONBLOCK)?,
    };
    // The descriptor's number may have been reused between the look and the open.
    match bell.metadata() {
        Ok(m) if m.file_type().is_fifo() && m.uid() == own_uid(m.uid()) => Ok(bell),
        _ => Err(format!("{} is not a bell of this user", path.display())),
    }
}

/// This process's user (`or` if `/proc/self` cannot say).
pub(super) fn own_uid(or: u32) -> u32 {
    std::fs::metadata("/proc/self").map_or(or, |m| m.uid())
}

/// Opens, read-write and never through a link, a file a peer announced in `dir`, the
/// directory where this rank makes its own: a name of this job's kind there, never a path
/// elsewhere.
pub(super) fn open_in_dir(
    dir: &Path,
    announced: &str,
    kind: &str,
    flags: i32,
) -> Result<(File, PathBuf), String> {
    let path = PathBuf::from(announced);
    let named_ok = path.parent() == Some(dir)
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(PREFIX) && !n.contains('/'));
    if !named_ok {
        return Err(format!(
            "{} is not {kind} in {}",
            path.display(),
            dir.display()
        ));
    }
    let file = open_rw(&path, libc::O_NOFOLLOW | flags)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    Ok((file, path))
}

/// Opens, read-write, a peer's descriptor announced as `/proc/<pid>/fd/<fd>` (numbers
/// only), if its link names what it must be (`kind`). Through the magic link (no
/// O_NOFOLLOW): the path was made of numbers here. Only processes that may look into the
/// peer (its user) get this far.
pub(super) fn open_peer_fd(
    announced: &str,
    kind: &str,
    is_kind: impl Fn(&Path) -> bool,
    flags: i32,
) -> Result<(File, PathBuf), String> {
    let path = proc_fd_path(announced)?;
    let target = std::fs::read_link(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !is_kind(&target) {
        return Err(format!(
            "{} is {}, not {kind}",
            path.display(),
            target.display()
        ));
    }
    let file = open_rw(&path, flags).map_err(|e| format!("opening {}: {e}", path.display()))?;
    Ok((file, path))
}

/// Opens `path` for reading and writing with `flags` besides (close-on-exec, as std does).
pub(super) fn open_rw(path: &Path, flags: i32) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .open(path)
}

/// `/proc/<pid>/fd/<fd>` when `announced` is exactly that, in numbers.
pub(super) fn proc_fd_path(announced: &str) -> Result<PathBuf, String> {
    let numbers = announced
        .strip_prefix("/proc/")
        .and_then(|rest| rest.split_once("/fd/"))
        .and_then(|(pid, fd)| Some((pid.parse::<u32>().ok()?, fd.parse::<u32>().ok()?)));
    match numbers {
        Some((pid, fd)) => Ok(PathBuf::from(format!("/proc/{pid}/fd/{fd}"))),
        None => Err(format!("{announced:?} is not a /proc/<pid>/fd/<fd> path")),
    }
}

/// Opens the segment a peer announced, where this rank makes its own: a file in `dir`
/// whose name is of this job's kind (never a path elsewhere), or, without a directory, a
/// peer's anonymous segment as `/proc/<pid>/fd/<fd>` (numbers only), which must be one.
pub(super) fn open_announced(
    dir: Option<&Path>,
    announced: &str,
) -> Result<(File, PathBuf), String> {
    let Some(dir) = dir else {
        // The link names what the descriptor is: one of rcoll's anonymous segments.
        return open_peer_fd(
            announced,
            "a segment",
            |target| {
                target == Path::new(&format!("/memfd:{MEMFD_NAME} (deleted)"))
                    || target == Path::new(&format!("/memfd:{MEMFD_NAME}"))
            },
            0,
        );
    };
    open_in_dir(dir, announced, "a segment", 0)
}
