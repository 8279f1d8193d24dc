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
