//! Point-to-point send and receive.

mod common;

use std::time::Duration;

use rcoll::Error;

use common::on_ranks;

const T: Duration = Duration::from_secs(30);

#[test]
fn ring_shift_with_send_recv() {
    for n in 2..=6 {
        let results = on_ranks(n, None, T, |comm| {
            let (r, n) = (comm.rank(), comm.size());
            let send: Vec<u64> = (0..1000).map(|i| (r * 1_000_000 + i) as u64).collect();
            let mut recv = vec![0u64; 1000];
            comm.send_recv(&send, (r + 1) % n, &mut recv, (r + n - 1) % n)
                .map(|_| recv)
        });
        for (r, res) in results.into_iter().enumerate() {
            let left = (r + n - 1) % n;
            let want: Vec<u64> = (0..1000).map(|i| (left * 1_000_000 + i) as u64).collect();
            assert_eq!(res.unwrap(), want);
        }
    }
}

#[test]
fn messages_between_a_pair_match_in_call_order() {
    let results = on_ranks(3, None, T, |comm| -> Result<Vec<Vec<i32>>, Error> {
        match comm.rank() {
            0 => {
                for k in 0..5 {
                    comm.send(&vec![k; 3 + k as usize], 2)?;
                }
                Ok(vec![])
            }
            2 => (0..5)
                .map(|k| {
                    let mut b = vec![0i32; 3 + k];
                    comm.recv(&mut b, 0).map(|_| b)
                })
                .collect(),
            _ => Ok(vec![]),
        }
    });
    let got = results.into_iter().nth(2).unwrap().unwrap();
    for (k, b) in got.iter().enumerate() {
        assert_eq!(b, &vec![k as i32; 3 + k]);
    }
}

#[test]
fn point_to_point_and_collectives_interleave() {
    let results = on_ranks(2, None, T, |comm| -> Result<(Vec<f32>, Vec<f32>), Error> {
        let mut a = vec![comm.rank() as f32 + 1.0; 10];
        let mut got = vec![0f32; 4];
        if comm.rank() == 0 {
            comm.send(&[7f32; 4], 1)?;
        }
        comm.all_reduce_in_place(&mut a, rcoll::ReduceOp::Sum)?;
        if comm.rank() == 1 {
            comm.recv(&mut got, 0)?;
        }
        Ok((a, got))
    });
    let (a, got) = results[1].clone().unwrap();
    assert_eq!(a, vec![3.0; 10]);
    assert_eq!(got, vec![7.0; 4]);
}

#[test]
fn sending_to_yourself_or_nobody_is_a_typed_error() {
    let results = on_ranks(2, None, T, |comm| {
        let me = comm.rank();
        comm.send(&[1u8], me)
    });
    for res in results {
        assert!(matches!(res, Err(Error::PeerOutOfRange { .. })), "{res:?}");
    }
    let results = on_ranks(2, None, T, |comm| comm.recv(&mut [0u8], 9));
    for res in results {
        assert!(
            matches!(res, Err(Error::PeerOutOfRange { peer: 9, .. })),
            "{res:?}"
        );
    }
}

/// What rank `from` sends to rank `to` as its `k`-th message of an exchange: `len`
/// elements that name all three.
fn message(from: usize, to: usize, k: usize, len: usize) -> Vec<u32> {
    (0..len)
        .map(|i| (from * 1_000_000 + to * 10_000 + k * 1_000 + i % 997) as u32)
        .collect()
}

/// Where a message landed: from which rank, its number between the pair, and the range.
type Landing = (usize, usize, std::ops::Range<usize>);

/// A group of sends and receives with every rank listing its receives first (which
/// blocking sends and receives in that order would deadlock on): each rank sends two
/// messages to each other rank, a small one and one of 1 MiB, and receives two from each,
/// into one buffer at ranges in a shuffled order; each message lands where its receive
/// said, in order between each pair.
#[test]
fn an_exchange_with_every_receive_listed_first_completes() {
    let (small, large) = (3, 1 << 18);
    for n in [2, 3, 5] {
        let results = on_ranks(
            n,
            None,
            T,
            |comm| -> Result<(Vec<u32>, Vec<Landing>), Error> {
                let me = comm.rank();
                let peers: Vec<usize> = (0..n).filter(|&p| p != me).collect();
                let mut send = Vec::new();
                let mut sends = Vec::new();
                for &p in &peers {
                    for (k, len) in [(0, small), (1, large)] {
                        let at = send.len();
                        send.extend(message(me, p, k, len));
                        sends.push((p, at..at + len));
                    }
                }
                // Receive ranges laid out from the last peer down, each pair's two messages
                // apart, so that list order and buffer order differ.
                let mut recvs = Vec::new();
                let mut expected = Vec::new();
                let mut at = 0;
                for &p in peers.iter().rev() {
                    for (k, len) in [(0, small), (1, large)] {
                        recvs.push((p, at..at + len));
                        expected.push((p, k, at..at + len));
                        at += len;
                    }
                }
                let mut recv = vec![0u32; at];
                comm.exchange(&send, &sends, &mut recv, &recvs)?;
                Ok((recv, expected))
            },
        );
        for (me, res) in results.into_iter().enumerate() {
            let (recv, expected) = res.unwrap_or_else(|e| panic!("{n} ranks, rank {me}: {e}"));
            for (from, k, range) in expected {
                let want = message(from, me, k, range.len());
                assert!(
                    recv[range.clone()] == want[..],
                    "{n} ranks: rank {me}'s message {k} from {from} at {range:?}"
                );
            }
        }
    }
}

/// A bad exchange fails on every rank, never hangs: a range past the buffer is a typed
/// error on the rank that gave it, overlapping receive ranges a configuration error
/// there, and the other rank's exchange fails (the group aborted) instead of waiting.
#[test]
fn a_bad_exchange_fails_on_every_rank() {
    let results = on_ranks(2, None, T, |comm| {
        let other = 1 - comm.rank();
        let send = [1u8; 8];
        let mut recv = [0u8; 8];
        let sends = [(other, 0..8)];
        if comm.rank() == 0 {
            comm.exchange(&send, &[(other, 4..12)], &mut recv, &[(other, 0..8)])
        } else {
            comm.exchange(&send, &sends, &mut recv, &[(other, 0..8)])
        }
    });
    assert!(
        matches!(
            results[0],
            Err(Error::BufferLength {
                expected: 12,
                got: 8,
                ..
            })
        ),
        "{:?}",
        results[0]
    );
    assert!(results[1].is_err(), "{:?}", results[1]);

    let results = on_ranks(2, None, T, |comm| {
        let other = 1 - comm.rank();
        let send = [1u8; 8];
        let mut recv = [0u8; 8];
        let recvs = [(other, 0..5), (other, 4..8)];
        let sends = [(other, 0..5), (other, 0..4)];
        if comm.rank() == 0 {
            comm.exchange(&send, &sends, &mut recv, &recvs)
        } else {
            comm.exchange(&send, &sends, &mut recv, &[(other, 0..5), (other, 5..8)])
        }
    });
    match &results[0] {
        Err(Error::Config(m)) => assert!(m.contains("overlap"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(results[1].is_err(), "{:?}", results[1]);
}
