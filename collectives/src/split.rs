//! [`Communicator::split`]: subgroups of a process group, in one collective call.
//!
//! Every rank says its color and key (an all_gather over the parent). Ranks of one color
//! form a new group, ranked by key and then by parent rank; the first of them (its new
//! rank 0) binds a rendezvous listener and draws a fresh job secret, which reach the others
//! in a second all_gather over the parent (whose connections already proved the parent's
//! secret). Then each group bootstraps exactly as a process group does: its own
//! connections, and the transport the parent was built with, so groups and the parent run
//! independently and concurrently afterwards.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use rcoll_transport::tcp::bootstrap;

use crate::communicator::Communicator;
use crate::error::{Error, Result};

/// One rank's published rendezvous: `[port | family << 16 | ok << 24, ip (2 words), secret
/// (2 words)]`; `ok == 0` carries a failure (the reason stays in the leader's own error).
const RECORD: usize = 5;

impl Communicator {
    /// Splits the group, as `MPI_Comm_split` and `ncclCommSplit` do: ranks that pass the
    /// same `color` form a new communicator, ranked by `key` and then by their rank here;
    /// a rank passing `None` takes part but joins no group and gets `None`. Every rank of
    /// this communicator must call it (it is a collective); this communicator stays usable
    /// and independent of the new ones.
    ///
    /// Needs a process group ([`crate::process::Builder`]): the new groups connect anew, with
    /// the same transport and settings.
    pub fn split(&mut self, color: Option<u32>, key: i64) -> Result<Option<Communicator>> {
        let me = self.rank();
        let Some(origin) = self.origin.clone() else {
            return Err(Error::Config(format!(
                "rank {me}: split needs a process group (process::Builder or process::init): \
                 this communicator has no rendezvous to build subgroups from"
            )));
        };
        let n = self.size();
        let mine = [color.map_or(u64::MAX, u64::from), key as u64];
        let mut said = vec![0u64; 2 * n];
        self.all_gather(&mine, &mut said)?;
        let color_of = |r: usize| said[2 * r];
        let key_of = |r: usize| said[2 * r + 1] as i64;
        let members: Vec<usize> = match color {
            None => Vec::new(),
            Some(c) => {
                let mut m: Vec<usize> = (0..n).filter(|&r| color_of(r) == u64::from(c)).collect();
                m.sort_by_key(|&r| (key_of(r), r));
                m
            }
        };
        let leads = members.first() == Some(&me) && members.len() > 1;
        let mut record = [0u64; RECORD];
        let mut trouble = None;
        if leads {
            match rendezvous(origin.ip) {
                Ok((addr, secret)) => record = encode(addr, secret),
                Err(e) => {
                    trouble = Some(format!(
                        "rank {me} cannot open the subgroup's rendezvous: {e}"
                    ))
                }
            }
        }
        let mine = (record[0] >> 24 == 1).then(|| decode(&record)).flatten();
        // The listener reserved here, if any, closed on every way out but its use.
        let release = || {
            if let Some((addr, _)) = mine {
                bootstrap::release_root(addr);
            }
        };
        let mut records = vec![0u64; RECORD * n];
        if let Err(e) = self.all_gather(&record, &mut records) {
            release();
            return Err(e);
        }
        if let Some(why) = trouble {
            release();
            return Err(Error::Config(why));
        }
        let Some(rank) = members.iter().position(|&r| r == me) else {
            release();
            return Ok(None);
        };
        let leader = members[0];
        let (root, secret) = if members.len() == 1 {
            (SocketAddr::new(origin.ip, 0), 0)
        } else {
            decode(&records[RECORD * leader..RECORD * (leader + 1)]).ok_or_else(|| {
                Error::Config(format!(
                    "rank {me}: split: rank {leader}, first of color {}, could not open the \
                     subgroup's rendezvous (its own error says why)",
                    color_of(leader)
                ))
            })?
        };
        tracing::info!(rank = me, color = ?color, new_rank = rank, size = members.len(), %root, "split");
        let built = (origin.form)(rank, members.len(), root, secret).map(Some);
        // Taken by the group's rank 0 (this rank, if it leads) when it formed; a failure
        // before that leaves it reserved.
        release();
        built
    }
}

fn rendezvous(ip: IpAddr) -> std::io::Result<(SocketAddr, u128)> {
    Ok((
        bootstrap::listen_root(ip)?,
        bootstrap::auth::random_secret()?,
    ))
}

fn encode(addr: SocketAddr, secret: u128) -> [u64; RECORD] {
    let (family, ip) = match addr.ip() {
        IpAddr::V4(v4) => (4u64, u128::from(v4.to_ipv6_mapped())),
        IpAddr::V6(v6) => (6u64, u128::from(v6)),
    };
    [
        u64::from(addr.port()) | family << 16 | 1 << 24,
        (ip >> 64) as u64,
        ip as u64,
        (secret >> 64) as u64,
        secret as u64,
    ]
}

fn decode(r: &[u64]) -> Option<(SocketAddr, u128)> {
    if r[0] >> 24 != 1 {
        return None;
    }
    let v6 = Ipv6Addr::from(u128::from(r[1]) << 64 | u128::from(r[2]));
    let ip = match (r[0] >> 16) & 0xff {
        4 => IpAddr::V4(v6.to_ipv4_mapped()?),
        6 => IpAddr::V6(v6),
        _ => return None,
    };
    let secret = u128::from(r[3]) << 64 | u128::from(r[4]);
    Some((SocketAddr::new(ip, (r[0] & 0xffff) as u16), secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_both_address_families_and_the_secret() {
        for addr in ["127.0.0.1:4242", "[::1]:65535", "10.1.2.3:1"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let secret = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
            assert_eq!(decode(&encode(addr, secret)), Some((addr, secret)));
        }
        assert_eq!(decode(&[0; RECORD]), None, "a failed leader's record");
    }

    #[test]
    fn a_group_without_a_rendezvous_cannot_split() {
        let comms = crate::local::group(1).unwrap();
        let mut comm = comms.into_iter().next().unwrap();
        let Err(e) = comm.split(Some(0), 0) else {
            panic!("an in-process group split")
        };
        assert!(e.to_string().contains("process group"), "{e}");
    }
}
