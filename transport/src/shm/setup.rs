//! Setting up shared memory: the options, this rank's segment and doorbell, the exchange
//! with the local peers over the control connections, and the checks on what they
//! announce. [`Prepared::finish`] layers the result on the transport beneath.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::segment::{self, InRing, OutRing, Segment, Shape};
use super::{
    cma, Link, ShmTransport, DEFAULT_SEGMENT_BUDGET, DEFAULT_SINGLE_COPY, DEFAULT_SLOTS,
    DEFAULT_SPIN, SMALL_BYTES, SMALL_POOL,
};
use crate::error::TransportError;
use crate::hosts::HostMap;
use crate::tcp::control::Exchange;
use crate::tcp::TcpTransport;
use crate::transport::{Endpoint, Transport};
use crate::types::Rank;

/// Tunables of the shared-memory backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Largest message (the communicator's segment size).
    pub slot_bytes: usize,
    /// Slots per ring (`RCOLL_SHM_SLOTS`); `None`: [`DEFAULT_SLOTS`], fewer when the
    /// host has so many ranks that the segment would pass [`DEFAULT_SEGMENT_BUDGET`].
    pub slots: Option<usize>,
    /// How long a wait spins before blocking (`RCOLL_SHM_SPIN_US`).
    pub spin: Duration,
    /// Where segments are created as files (`RCOLL_SHM_DIR`); `None` (the default): as
    /// anonymous memory files (`memfd_create`), which peers open through `/proc/<pid>/fd`
    /// and which vanish with the last process holding them, so a rank killed at any point
    /// leaves nothing behind. A file in a directory is unlinked once every peer has mapped
    /// it; a rank killed before that leaves it (the directory is for ranks that cannot see
    /// each other's `/proc`, such as containers with their own process namespaces).
    pub dir: Option<PathBuf>,
    /// Whether a pair that cannot share memory fails the setup (`RCOLL_TRANSPORT=shm`)
    /// rather than fall back to the transport beneath.
    pub required: bool,
    /// Smallest send from the caller's memory that the receiver reads from there, in one
    /// copy (`RCOLL_SHM_SINGLE_COPY`: bytes, `on` for [`DEFAULT_SINGLE_COPY`], or `off`,
    /// the default); `None`: never.
    pub single_copy: Option<usize>,
    /// The CPUs this host's ranks share ([`crate::topology::host_cpus`]): with more ranks
    /// than that, a waiting rank yields its CPU rather than spin.
    pub cpus: usize,
}

impl Options {
    /// Defaults for messages up to `slot_bytes`, with the `RCOLL_SHM_*` overrides.
    pub fn from_env(slot_bytes: usize) -> Result<Options, String> {
        let var = crate::env::var;
        let slots = crate::env::parsed("RCOLL_SHM_SLOTS", "a number in 2..=1024", |n| {
            (2..=1024).contains(n)
        })?;
        let spin =
            crate::env::duration("RCOLL_SHM_SPIN_US", Duration::from_micros, "microseconds")?
                .unwrap_or(DEFAULT_SPIN);
        Ok(Options {
            cpus: crate::topology::host_cpus()?,
            slot_bytes: slot_bytes.max(64),
            slots,
            spin,
            dir: var("RCOLL_SHM_DIR").map(PathBuf::from),
            required: false,
            // Off unless asked for: measured, two copies pipelined through the ring beat
            // one `process_vm_readv` (see the module's documentation).
            single_copy: match var("RCOLL_SHM_SINGLE_COPY") {
                None => None,
                Some(v) if v.trim() == "off" => None,
                Some(v) if v.trim() == "on" => Some(DEFAULT_SINGLE_COPY),
                Some(v) => Some(parse_size(&v).ok_or_else(|| {
                    format!(
                        "RCOLL_SHM_SINGLE_COPY={v:?} is neither a size (such as 32K), on nor off"
                    )
                })?),
            },
        })
    }

    /// The shape of a segment for `peers` local peers.
    fn shape(&self, peers: usize) -> Shape {
        let per_slot = Shape::per_slot(self.slot_bytes);
        let slots = self.slots.unwrap_or_else(|| {
            (DEFAULT_SEGMENT_BUDGET / (per_slot * peers.max(1))).clamp(2, DEFAULT_SLOTS)
        });
        Shape {
            rings: peers,
            slots,
            slot_bytes: self.slot_bytes,
        }
    }
}

/// This rank's segment and doorbell, made and announced, with its peers' segments mapped:
/// what [`prepare`] returns and [`Prepared::finish`] layers on the transport beneath.
pub struct Prepared {
    rank: Rank,
    hosts: Arc<HostMap>,
    opts: Options,
    mine: Option<Arc<Segment>>,
    bell: Option<File>,
    /// Per peer: its segment and doorbell, when the pair shares memory both ways.
    peers: Vec<Option<PeerSegment>>,
}

struct PeerSegment {
    seg: Arc<Segment>,
    bell: File,
    /// This rank's ring in the peer's segment; the peer's ring in this rank's is at the
    /// peer's index among this rank's local peers.
    ring_there: usize,
    ring_here: usize,
    /// The peer's process, if this rank may read its memory; else why not.
    read_from: Result<i32, String>,
    /// Whether the peer may read this rank's memory (it said so).
    read_by: bool,
}

impl Prepared {
    /// Whether this rank and `peer` share memory (both ways: the peer knows it too).
    pub fn shares_memory_with(&self, peer: Rank) -> bool {
        matches!(self.peers.get(peer.index()), Some(Some(_)))
    }

    /// How many local peers this rank shares memory with.
    pub fn pairs(&self) -> usize {
        self.peers.iter().flatten().count()
    }

    /// Layers the shared-memory pairs on `inner`, which carries every other pair and the
    /// control plane. `inner` must be the transport of the same group (built on the same
    /// connections as the [`TcpTransport`] given to [`prepare`]).
    pub fn finish(self, mut inner: Box<dyn Transport>) -> Result<ShmTransport, TransportError> {
        let me = self.rank;
        let (Some(mine), Some(bell)) = (self.mine, self.bell) else {
            return Err(TransportError::Bootstrap {
                rank: me,
                reason: "shared memory: no segment to layer".into(),
            });
        };
        // Wake-ups come through the transport beneath when it can watch the doorbell;
        // otherwise waits poll it every millisecond.
        let bell_watched = inner.watch_fd(bell.as_raw_fd()).is_ok();
        let mut links: Vec<Option<Link>> = Vec::with_capacity(self.peers.len());
        for p in self.peers {
            links.push(p.map(|p| {
                let peer_seg = Arc::clone(&p.seg);
                let ringer = p.bell;
                let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
                    // A load first: the flag's line stays shared while the peer is awake
                    // (a swap would take it from the peer on every message).
                    let flag = peer_seg.sleeping();
                    if flag.load(Ordering::SeqCst) == 1 && flag.swap(0, Ordering::SeqCst) == 1 {
                        // Full or gone: either way nothing more to do (a full queue
                        // already holds a wake-up; a dead peer is the control plane's).
                        let _ = (&ringer).write(&[1]);
                    }
                });
                Link {
                    inbox: InRing::new(Arc::clone(&mine), p.ring_here),
                    outbox: OutRing::new(p.seg, p.ring_there),
                    wake,
                    copied: 0,
                    read_from: p.read_from.ok(),
                    read_by: p.read_by,
                }
            }));
        }
        let remote = (0..links.len()).any(|r| r != me.index() && links[r].is_none());
        let name = match (remote, inner.endpoint().name) {
            (false, _) => "shm",
            (true, "verbs") => "shm+verbs",
            (true, _) => "shm+tcp",
        };
        let slots = mine.shape().slots;
        let mut t = ShmTransport {
            me: Endpoint {
                hosts: Some(Arc::clone(&self.hosts)),
                ..Endpoint::new(name, me, links.len())
            },
            slot_bytes: self.opts.slot_bytes,
            spin: self.opts.spin,
            crowded: self.hosts.crowds_cpus_of(me, self.opts.cpus),
            hosts: self.hosts,
            links,
            mine,
            bell,
            bell_watched,
            late_wakeups: 0,
            sleeps: 0,
            arrived: Default::default(),
            drained: 0,
            seen_drained: 0,
            seen_released: 0,
            send_blocked: false,
            seen_taken: 0,
            marked: false,
            quick_misses: 0,
            // Both pools filled now, to what they keep at most: what they hold is then the
            // same from the first call on, whatever the calls' timing (a pool filled as
            // buffers come back grows at the rare moments many are out at once).
            small: (0..SMALL_POOL)
                .map(|_| Vec::with_capacity(SMALL_BYTES))
                .collect(),
            large: (0..slots)
                .map(|_| Vec::with_capacity(self.opts.slot_bytes))
                .collect(),
            outstanding: Vec::new(),
            withdrawn: Vec::new(),
            next_token: 0,
            // Never for what fits in a descriptor.
            single_copy: self
                .opts
                .single_copy
                .map_or(usize::MAX, |b| b.max(segment::INLINE + 1)),
            broken: None,
            last_control: Instant::now(),
            remote,
            inner,
        };
        t.me.details = t.describe();
        Ok(t)
    }
}

/// `123`, `64K`, `1M` or `1G` bytes.
fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim();
    let (digits, unit) = match v.char_indices().last()? {
        (i, 'k' | 'K') => (&v[..i], 1 << 10),
        (i, 'm' | 'M') => (&v[..i], 1 << 20),
        (i, 'g' | 'G') => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

/// What a rank tells its local peers so that they may read its memory: its process, and
/// where in it a value of this setup's lies: 16 random bytes, then its rank (they check
/// they read that value, so a peer cannot pass off another's process, or the reader's
/// own, as its own).
#[derive(Debug)]
struct Readable {
    pid: i32,
    addr: u64,
    value: [u8; 24],
}

/// The value a rank announces (see [`Readable`]): `random`, then `rank`.
fn probe_value(random: [u8; 16], rank: Rank) -> [u8; 24] {
    let mut v = [0u8; 24];
    v[..16].copy_from_slice(&random);
    v[16..].copy_from_slice(&u64::from(rank.0).to_le_bytes());
    v
}

/// Makes this rank's segment, exchanges segments with its local peers over `tcp`, and
/// maps theirs. Every rank of the group must call it (ranks alone on their host too:
/// they exchange nothing). Segments are unlinked before this returns.
pub fn prepare(
    tcp: &mut TcpTransport,
    hosts: Arc<HostMap>,
    opts: &Options,
    deadline: Instant,
) -> Result<Prepared, TransportError> {
    let me = tcp.endpoint().rank;
    let local: Vec<Rank> = hosts.neighbours(me).collect();
    let shape = opts.shape(local.len());
    let mut prepared = Prepared {
        rank: me,
        hosts: Arc::clone(&hosts),
        opts: opts.clone(),
        mine: None,
        bell: None,
        peers: (0..hosts.nranks()).map(|_| None).collect(),
    };
    if local.is_empty() {
        return Ok(prepared);
    }
    // This rank's segment and doorbell, or why not (told to the peers in their place).
    let made =
        make_segment(opts.dir.as_deref(), shape).and_then(|(file, path, seg)| {
            match make_bell(opts.dir.as_deref()) {
                Ok((bell, bell_path)) => Ok((file, path, seg, bell, bell_path)),
                Err(e) => {
                    if let Some(p) = &path.file {
                        let _ = std::fs::remove_file(p);
                    }
                    Err(e)
                }
            }
        });
    // The value peers read to check they may (kept here until every peer answered).
    let mut random = [0u8; 16];
    let readable = opts.single_copy.is_some() && getrandom::fill(&mut random).is_ok();
    let value = Box::new(probe_value(random, me));
    let (announce, ours) = match made {
        Ok((file, path, seg, bell, bell_path)) => (
            Ok(format!(
                "{}\n{}\n{}\n{}\n{}\n{}",
                path.announced,
                bell_path.announced,
                shape.rings,
                shape.slots,
                shape.slot_bytes,
                if readable {
                    format!(
                        "{} {} {}",
                        std::process::id(),
                        value.as_ptr() as u64,
                        hex(&value[..])
                    )
                } else {
                    "unreadable".into()
                }
            )),
            Some((file, [path.file, bell_path.file], seg, bell)),
        ),
        Err(e) => (Err(e.to_string()), None),
    };
    let message = match &announce {
        Ok(a) => format!("ok\n{a}"),
        Err(e) => format!("error\n{e}"),
    };
    // From here on this rank's file (if it has one) must go whatever happens.
    let unlink = Unlink(
        ours.as_ref()
            .map(|(_, files, _, _)| files.iter().flatten().cloned().collect())
            .unwrap_or_default(),
    );
    // What this rank made, which a peer's announcement must not turn out to be (a
    // `/proc/<pid>/fd` path of a process namespace of its own can name this process).
    let own: Vec<(u64, u64)> = ours
        .iter()
        .flat_map(|(file, _, _, bell)| [file.metadata(), bell.metadata()])
        .flatten()
        .map(|m| (m.dev(), m.ino()))
        .collect();
    let theirs =
        tcp.exchange_control(&local, Exchange::ShmSegment, message.as_bytes(), deadline)?;
    // Map each peer's segment: this rank's ring there is its index among the peer's local
    // peers.
    let mut mapped: Vec<Result<PeerSegment, String>> = Vec::with_capacity(local.len());
    for (&p, bytes) in local.iter().zip(theirs) {
        let ring_there = hosts.neighbours(p).position(|r| r == me).unwrap_or(0);
        let ring_here = local.iter().position(|&r| r == p).unwrap_or(0);
        mapped.push(
            open_peer(opts.dir.as_deref(), &bytes, ring_there, &own)
                .map(|(seg, bell, theirs)| {
                    // Whether this rank may read the peer's memory (single copy).
                    let read_from = match (opts.single_copy, theirs) {
                        (None, _) => Err("single copy is off here".to_owned()),
                        (_, None) => Err(format!("{p} has single copy off")),
                        (Some(_), Some(r)) if r.value[16..] != probe_value([0; 16], p)[16..] => {
                            Err(format!("{p} announced another rank's process"))
                        }
                        (Some(_), Some(r)) => cma::probe(r.pid, r.addr, &r.value).map(|()| r.pid),
                    };
                    PeerSegment {
                        seg,
                        bell,
                        ring_there,
                        ring_here,
                        read_from,
                        read_by: false,
                    }
                })
                .map_err(|e| format!("{p}'s segment: {e}")),
        );
    }
    let answers: Vec<String> = mapped
        .iter()
        .map(|m| match m {
            Ok(PeerSegment {
                read_from: Ok(_), ..
            }) => "mapped\nread".to_owned(),
            Ok(_) => "mapped".to_owned(),
            Err(e) => e.clone(),
        })
        .collect();
    for (&p, answer) in local.iter().zip(&answers) {
        tcp.send_control(p, Exchange::ShmMapped, answer.as_bytes(), deadline)?;
    }
    let mut acks = Vec::with_capacity(local.len());
    for &p in &local {
        acks.push(tcp.recv_control(p, Exchange::ShmMapped, deadline)?);
    }
    drop(unlink);
    drop(value);
    let mut refused: Vec<String> = Vec::new();
    if let Err(e) = &announce {
        refused.push(format!("this rank's segment: {e}"));
    }
    for ((&p, m), ack) in local.iter().zip(mapped).zip(acks) {
        let (mapped_ok, read_by) = match ack.as_slice() {
            b"mapped" => (true, false),
            b"mapped\nread" => (true, readable),
            _ => (false, false),
        };
        match (m, mapped_ok) {
            (Ok(mut peer), true) if ours.is_some() => {
                peer.read_by = read_by;
                if let Err(why) = &peer.read_from {
                    tracing::debug!(rank = %me, peer = %p, %why, "no single copy from this peer");
                }
                prepared.peers[p.index()] = Some(peer);
            }
            (Ok(_), true) => {}
            (Ok(_), false) => refused.push(format!(
                "{p} could not map this rank's segment: {}",
                String::from_utf8_lossy(&ack)
            )),
            (Err(e), _) => refused.push(e),
        }
    }
    if !refused.is_empty() {
        let reason = format!(
            "shared memory with local peers failed: {}{}",
            refused.join("; "),
            if opts.dir.as_deref() == Some(Path::new("/dev/shm")) {
                " (a container's /dev/shm is often 64 MiB: `--shm-size`, or fewer slots with \
                 RCOLL_SHM_SLOTS)"
            } else {
                ""
            }
        );
        if opts.required {
            return Err(TransportError::Bootstrap { rank: me, reason });
        }
        tracing::warn!(rank = %me, %reason, "those pairs stay on the network transport");
    }
    if let Some((_file, _path, seg, bell)) = ours {
        seg.prefault();
        prepared.mine = Some(seg);
        prepared.bell = Some(bell);
    }
    Ok(prepared)
}

/// Maps the segment a peer announced (`ok`, path, bell, rings, slots, slot bytes), after
/// checking that it is one: a file of this job's kind in the segment directory, owned by
/// this user, of exactly the announced shape, with the magic in its header. A peer that
/// announced a failure is refused with its reason.
fn open_peer(
    dir: Option<&Path>,
    announced: &[u8],
    ring: usize,
    own: &[(u64, u64)],
) -> Result<(Arc<Segment>, File, Option<Readable>), String> {
    let hint = |e: String| match dir {
        None => format!(
            "{e} (ranks in process namespaces of their own, as containers are, cannot open \
             each other's /proc: give them a directory they share in RCOLL_SHM_DIR)"
        ),
        Some(_) => e,
    };
    let theirs = |f: &File| {
        f.metadata()
            .is_ok_and(|m| !own.contains(&(m.dev(), m.ino())))
    };
    let Announcement {
        path,
        bell,
        shape,
        readable,
    } = parse_announcement(announced)?;
    if ring >= shape.rings || shape.slots == 0 || shape.slots > 1024 {
        return Err(format!("an impossible shape {shape:?}"));
    }
    let bytes = shape.bytes().ok_or("a shape past the address space")?;
    let (file, path) = open_announced(dir, &path).map_err(hint)?;
    if !theirs(&file) {
        return Err(hint(format!(
            "{} is this rank's own segment",
            path.display()
        )));
    }
    let meta = file.metadata().map_err(|e| e.to_string())?;
    // A file of another user is not this job's.
    let uid = own_uid(meta.uid());
    if !meta.file_type().is_file() || meta.uid() != uid || meta.len() != bytes as u64 {
        return Err(format!(
            "{} is not a segment of this user of {bytes} bytes",
            path.display()
        ));
    }
    let seg = Segment::open(&file, shape).map_err(|e| format!("{}: {e}", path.display()))?;
    let bell_at = bell;
    let bell = open_bell(dir, &bell_at).map_err(|e| hint(format!("its bell: {e}")))?;
    if !theirs(&bell) {
        return Err(hint(format!("its bell {bell_at} is this rank's own")));
    }
    Ok((Arc::new(seg), bell, readable))
}

/// A peer's announcement of its segment, as read (not yet checked against anything).
#[derive(Debug)]
pub struct Announcement {
    path: String,
    bell: String,
    shape: Shape,
    readable: Option<Readable>,
}

/// Reads a peer's announcement: `ok`, its segment's path, its bell, rings, slots, slot
/// bytes, and whether its memory may be read (`pid address value`, or `unreadable`); or
/// `error` and why its segment could not be made. Anything else is refused, never a panic
/// (fuzzed: `fuzz/fuzz_targets/shm_announcement.rs`).
pub fn parse_announcement(announced: &[u8]) -> Result<Announcement, String> {
    let text = std::str::from_utf8(announced).map_err(|_| "not text".to_owned())?;
    let mut lines = text.lines();
    match lines.next() {
        Some("ok") => {}
        Some("error") => return Err(lines.collect::<Vec<_>>().join(" ")),
        _ => return Err("a malformed announcement".into()),
    }
    let mut field = || {
        lines
            .next()
            .ok_or_else(|| "a truncated announcement".to_owned())
    };
    let path = field()?.to_owned();
    let bell = field()?.to_owned();
    let mut number = || -> Result<usize, String> {
        field()?
            .parse()
            .map_err(|_| "a malformed announcement".to_owned())
    };
    let shape = Shape {
        rings: number()?,
        slots: number()?,
        slot_bytes: number()?,
    };
    let readable = readable_of(field()?)?;
    Ok(Announcement {
        path,
        bell,
        shape,
        readable,
    })
}

/// The announcement's last line: `pid address value` (hex), or `unreadable`.
fn readable_of(line: &str) -> Result<Option<Readable>, String> {
    if line == "unreadable" {
        return Ok(None);
    }
    let bad = || format!("a malformed announcement of its process: {line:?}");
    let mut words = line.split(' ');
    let (Some(pid), Some(addr), Some(value), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(bad());
    };
    let value: Vec<u8> = (0..value.len())
        .step_by(2)
        .map(|i| {
            value
                .get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    Ok(Some(Readable {
        pid: pid.parse().ok().filter(|p: &i32| *p > 0).ok_or_else(bad)?,
        addr: addr.parse().map_err(|_| bad())?,
        value: value.try_into().map_err(|_| bad())?,
    }))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

mod files;
pub(super) use files::open_bell;
use files::*;

#[cfg(test)]
mod tests;
