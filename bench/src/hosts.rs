//! Which host and process each rank runs in, for the header (nccl-tests prints one line
//! per rank, and the host count says whether the run crossed a network).

use rcoll::Communicator;

use crate::error::BenchError;

/// Where one rank runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankHost {
    /// Its process id.
    pub pid: u32,
    /// Its host name (at most [`HOST_BYTES`] bytes of it): the host key's name where
    /// the communicator knows the host map (`RCOLL_HOST` names emulated hosts).
    pub host: String,
    /// Which host it is, numbered from 0 (the communicator's host map, else the names).
    pub host_id: usize,
    /// Where it runs on its host (`numa 0 cpus 0-7 mlx5_0`), if known.
    pub place: String,
}

/// Bytes of a host name exchanged (Linux's HOST_NAME_MAX).
const HOST_BYTES: usize = 64;
/// Bytes of a placement summary exchanged.
const PLACE_BYTES: usize = 64;
/// Bytes per rank: the pid, little-endian, then the zero-padded host name and placement.
const RECORD: usize = 4 + HOST_BYTES + PLACE_BYTES;

/// Every rank's [`RankHost`], known on every rank (an all_gather).
pub fn exchange(comm: &mut Communicator) -> Result<Vec<RankHost>, BenchError> {
    let mut record = [0u8; RECORD];
    record[..4].copy_from_slice(&std::process::id().to_le_bytes());
    let name = host_name();
    let name = truncate(&name, HOST_BYTES);
    record[4..4 + name.len()].copy_from_slice(name.as_bytes());
    let place = comm
        .placement()
        .map(|p| {
            format!(
                "numa {} cpus {}{} {}",
                p.numa.map_or("-".into(), |n| n.to_string()),
                p.cpus,
                if p.bind { "" } else { " (unbound)" },
                p.device.as_deref().unwrap_or("")
            )
        })
        .unwrap_or_default();
    let place = truncate(place.trim_end(), PLACE_BYTES);
    record[4 + HOST_BYTES..4 + HOST_BYTES + place.len()].copy_from_slice(place.as_bytes());
    let mut all = vec![0u8; RECORD * comm.size()];
    comm.all_gather(&record, &mut all)?;
    let mut ranks: Vec<RankHost> = all.chunks_exact(RECORD).map(decode).collect();
    match comm.hosts() {
        Some(map) if map.nranks() == ranks.len() => {
            for (r, rh) in ranks.iter_mut().enumerate() {
                let h = map.host_of(rcoll::Rank::from(r));
                rh.host_id = h;
                let key = map.key(h);
                rh.host = key.split('/').next().unwrap_or(key).to_owned();
            }
        }
        _ => number_by_name(&mut ranks),
    }
    Ok(ranks)
}

/// Numbers hosts by name, in order of first appearance.
fn number_by_name(ranks: &mut [RankHost]) {
    let mut names: Vec<String> = Vec::new();
    for rh in ranks {
        rh.host_id = match names.iter().position(|n| *n == rh.host) {
            Some(i) => i,
            None => {
                names.push(rh.host.clone());
                names.len() - 1
            }
        };
    }
}

/// Distinct hosts.
pub fn count(ranks: &[RankHost]) -> usize {
    let mut hosts: Vec<usize> = ranks.iter().map(|r| r.host_id).collect();
    hosts.sort_unstable();
    hosts.dedup();
    hosts.len()
}

fn decode(record: &[u8]) -> RankHost {
    let (pid, rest) = record.split_at(4);
    let (host, place) = rest.split_at(HOST_BYTES.min(rest.len()));
    let pid = u32::from_le_bytes([pid[0], pid[1], pid[2], pid[3]]);
    let text = |b: &[u8]| {
        let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    RankHost {
        pid,
        host: text(host),
        host_id: 0,
        place: text(place),
    }
}

/// This machine's name: the kernel's, else `$HOSTNAME`, else `localhost`.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_hosts_are_counted_once() {
        let mut record = [0u8; RECORD];
        record[..4].copy_from_slice(&4242u32.to_le_bytes());
        record[4..9].copy_from_slice(b"node1");
        let a = decode(&record);
        assert_eq!(
            a,
            RankHost {
                pid: 4242,
                host: "node1".into(),
                host_id: 0,
                place: String::new(),
            }
        );
        let b = RankHost {
            pid: 7,
            host: "node2".into(),
            host_id: 0,
            place: String::new(),
        };
        let mut ranks = [a.clone(), b, a];
        number_by_name(&mut ranks);
        assert_eq!(count(&ranks), 2);
        assert_eq!(ranks.map(|r| r.host_id), [0, 1, 0]);
        assert_eq!(truncate("héllo", 2), "h");
    }
}
