//! Bad input and dead peers: a typed error on every rank, never a hang, never a panic.

mod common;

use std::sync::Barrier;
use std::time::Duration;

use rcoll::{Algorithm, Error, ReduceOp};
use rcoll_transport::TransportError;

use common::on_ranks;

const LONG: Duration = Duration::from_secs(30);

/// Whether `e` is the error a rank sees when another rank aborted the group.
fn aborted_by(e: &Error, rank: u32) -> bool {
    matches!(e, Error::Transport { source: TransportError::Aborted { by, .. }, .. } if by.0 == rank)
}

/// Rank `bad` failed with a short receive buffer (`got` of `expected`), every other rank
/// with the abort it sent.
fn short_recv_fails_every_rank(
    results: &[rcoll::Result<()>],
    bad: u32,
    expected: usize,
    got: usize,
) {
    for (r, res) in results.iter().enumerate() {
        let e = res.as_ref().expect_err("every rank must fail");
        if r == bad as usize {
            assert!(
                matches!(
                    e,
                    Error::BufferLength { rank, buffer: "recv", expected: x, got: g, .. }
                        if *rank == bad && *x == expected && *g == got
                ),
                "{e}"
            );
        } else {
            assert!(aborted_by(e, bad), "rank {r}: {e}");
            assert!(
                e.to_string().contains(&got.to_string()),
                "the abort reason travels: {e}"
            );
        }
    }
}

#[test]
fn wrong_length_on_one_rank_fails_every_rank_at_once() {
    let results = on_ranks(4, Some(Algorithm::Ring), LONG, |comm| {
        let send = vec![1.0f32; 100];
        let mut recv = vec![0.0f32; if comm.rank() == 2 { 99 } else { 100 }];
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum)
    });
    short_recv_fails_every_rank(&results, 2, 100, 99);
}

#[test]
fn a_repeated_call_with_a_wrong_length_still_fails_every_rank() {
    let results = on_ranks(3, None, LONG, |comm| {
        let send = vec![1.0f32; 8];
        let mut recv = vec![0.0f32; 8];
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
        assert_eq!(recv, vec![3.0; 8]);
        let mut short = vec![0.0f32; if comm.rank() == 1 { 7 } else { 8 }];
        comm.all_reduce(&send, &mut short, ReduceOp::Sum)
    });
    short_recv_fails_every_rank(&results, 1, 8, 7);
}

#[test]
fn root_out_of_range_is_a_typed_error() {
    let results = on_ranks(3, None, LONG, |comm| {
        let mut v = vec![1u8; 4];
        comm.broadcast_in_place(&mut v, 3)
    });
    for res in results {
        let e = res.unwrap_err();
        assert!(
            matches!(
                e,
                Error::RootOutOfRange {
                    root: 3,
                    nranks: 3,
                    ..
                }
            ) || matches!(e, Error::Transport { .. }),
            "{e}"
        );
    }
}

#[test]
fn an_op_the_type_cannot_do_is_a_typed_error() {
    let results = on_ranks(2, None, LONG, |comm| {
        let mut v = vec![1.5f64; 4];
        comm.all_reduce_in_place(&mut v, ReduceOp::BitXor)
    });
    for res in results {
        let e = res.unwrap_err();
        let typed = matches!(
            e,
            Error::UnsupportedOp {
                op: ReduceOp::BitXor,
                dtype: rcoll::DataType::F64,
                ..
            }
        );
        assert!(typed || matches!(e, Error::Transport { .. }), "{e}");
    }
}

#[test]
fn forcing_an_algorithm_that_cannot_serve_the_call_is_a_typed_error() {
    let results = on_ranks(2, None, LONG, |comm| {
        let send = vec![0i32; 4];
        let mut recv = vec![0i32; 4];
        comm.with_algorithm(Algorithm::Tree)
            .all_to_all(&send, &mut recv)
    });
    for res in results {
        let e = res.unwrap_err();
        let typed = matches!(
            e,
            Error::UnsupportedAlgorithm {
                algorithm: Algorithm::Tree,
                ..
            }
        );
        assert!(typed || matches!(e, Error::Transport { .. }), "{e}");
    }
}

#[test]
fn ranks_that_disagree_on_the_count_all_fail() {
    for algorithm in [
        Algorithm::Ring,
        Algorithm::Mesh,
        Algorithm::Tree,
        Algorithm::HalvingDoubling,
        Algorithm::RecursiveDoubling,
    ] {
        let results = on_ranks(4, Some(algorithm), LONG, |comm| {
            let n = if comm.rank() == 1 { 1000 } else { 1001 };
            let mut v = vec![1i64; n];
            comm.all_reduce_in_place(&mut v, ReduceOp::Sum)
        });
        for (r, res) in results.iter().enumerate() {
            let e = res
                .as_ref()
                .expect_err("a count mismatch must not go unnoticed");
            let typed = matches!(e, Error::Transport { .. } | Error::Mismatch { .. });
            assert!(typed, "{algorithm} rank {r}: {e}");
        }
        let named = results.iter().any(|r| match r {
            Err(Error::Mismatch { what, .. }) => what.contains("count"),
            Err(Error::Transport {
                source: TransportError::LengthMismatch { .. },
                ..
            }) => true,
            _ => false,
        });
        assert!(
            named,
            "{algorithm}: some rank names the count mismatch: {results:?}"
        );
    }
}

#[test]
fn a_rank_that_never_arrives_gives_a_timeout_naming_it() {
    let present = Barrier::new(4);
    let results = on_ranks(
        4,
        Some(Algorithm::Ring),
        Duration::from_millis(300),
        |comm| {
            if comm.rank() == 3 {
                // Alive (its endpoint stays open) but never calls the collective.
                present.wait();
                return None;
            }
            let mut v = vec![1.0f32; 1 << 16];
            let r = comm.all_reduce_in_place(&mut v, ReduceOp::Sum);
            present.wait();
            Some(r)
        },
    );
    let errors: Vec<Error> = results
        .into_iter()
        .flatten()
        .map(|r| r.unwrap_err())
        .collect();
    assert_eq!(errors.len(), 3);
    // The first to time out aborts the group; everyone fails, and the timeout names rank 3
    // or the rank waiting on it.
    let timeout = errors.iter().find_map(|e| match e {
        Error::Timeout {
            peer, waiting_for, ..
        } => Some((*peer, waiting_for.clone())),
        _ => None,
    });
    let (peer, waiting_for) = timeout.expect("some rank reports the timeout");
    assert!(peer.is_some(), "the timeout names the peer: {waiting_for}");
    for e in &errors {
        assert!(
            matches!(e, Error::Timeout { .. } | Error::Transport { .. }),
            "{e}"
        );
    }
}

#[test]
fn a_rank_that_dies_fails_the_others() {
    let results = on_ranks(4, Some(Algorithm::Ring), LONG, |comm| {
        if comm.rank() == 1 {
            return None; // the communicator is dropped: the rank is gone
        }
        let mut v = vec![1u32; 1 << 20];
        Some(comm.all_reduce_in_place(&mut v, ReduceOp::Sum))
    });
    let errors: Vec<Error> = results
        .into_iter()
        .flatten()
        .map(|r| r.unwrap_err())
        .collect();
    assert_eq!(errors.len(), 3);
    let names_the_dead = errors.iter().any(|e| {
        matches!(e, Error::Transport { source: TransportError::PeerClosed { peer, .. }, .. } if peer.0 == 1)
    });
    assert!(names_the_dead, "{errors:?}");
}

#[test]
fn a_failed_communicator_says_so_on_the_next_call() {
    let results = on_ranks(2, None, LONG, |comm| {
        let mut v = vec![0u8; 3];
        let first = comm.broadcast_in_place(&mut v, 7);
        let second = comm.barrier();
        (first, second)
    });
    for (first, second) in results {
        assert!(first.is_err());
        assert!(matches!(second, Err(Error::Poisoned { .. })), "{second:?}");
    }
}

#[test]
fn explicit_abort_wakes_every_rank() {
    let results = on_ranks(3, None, LONG, |comm| {
        if comm.rank() == 0 {
            comm.abort("operator asked");
            return None;
        }
        let mut v = vec![0u8; 1 << 20];
        Some(comm.broadcast_in_place(&mut v, 0))
    });
    for res in results.into_iter().flatten() {
        let e = res.unwrap_err();
        assert!(
            aborted_by(&e, 0) && e.to_string().contains("operator asked"),
            "{e}"
        );
    }
}

#[test]
fn ranks_running_different_algorithms_fail_instead_of_mixing_data() {
    // Rank 0 runs single_root, rank 1 mesh: their messages line up in length, so without
    // the fingerprint in every tag rank 1 would add its own contribution twice.
    let results = on_ranks(2, None, Duration::from_secs(5), |comm| {
        let algorithm = if comm.rank() == 0 {
            Algorithm::SingleRoot
        } else {
            Algorithm::Mesh
        };
        let mut v = vec![comm.rank() as f64 + 1.0; 16];
        comm.with_algorithm(algorithm)
            .all_reduce_in_place(&mut v, ReduceOp::Sum)
            .map(|_| v)
    });
    for (r, res) in results.iter().enumerate() {
        let e = res
            .as_ref()
            .expect_err("mismatched schedules must not produce a result");
        assert!(
            matches!(
                e,
                Error::Mismatch { .. } | Error::Transport { .. } | Error::Timeout { .. }
            ),
            "rank {r}: {e}"
        );
    }
    let named = results.iter().any(|r| {
        matches!(r, Err(Error::Mismatch { what, .. })
            if what.contains("algorithm single_root here, mesh there")
                || what.contains("algorithm mesh here, single_root there"))
    });
    assert!(named, "{results:?}");
}

#[test]
fn ranks_that_disagree_on_type_op_or_root_all_fail_and_say_how() {
    type Case = (
        &'static str,
        fn(&mut rcoll::Communicator) -> rcoll::Result<()>,
    );
    let cases: [Case; 3] = [
        ("element type", |c| {
            if c.rank() == 1 {
                c.all_reduce_in_place(&mut [0i32; 64], ReduceOp::Sum)
            } else {
                c.all_reduce_in_place(&mut [0f32; 64], ReduceOp::Sum)
            }
        }),
        ("operation", |c| {
            let op = if c.rank() == 1 {
                ReduceOp::Min
            } else {
                ReduceOp::Sum
            };
            c.all_reduce_in_place(&mut [0u64; 64], op)
        }),
        ("count, root, segment size or level algorithms", |c| {
            let root = usize::from(c.rank() == 1);
            c.broadcast_in_place(&mut [0u8; 64], root)
        }),
    ];
    for (words, call) in cases {
        // A rank whose part is only sending (a broadcast root, in its own view) finishes
        // its part without hearing from anyone; the rank that sees the disagreement (at the
        // end of that call or the next) aborts the group with it, so a later call fails.
        let results = on_ranks(3, Some(Algorithm::Ring), Duration::from_secs(5), |comm| {
            call(comm)
                .and_then(|_| comm.barrier())
                .and_then(|_| comm.barrier())
        });
        for (r, res) in results.iter().enumerate() {
            let e = res.as_ref().expect_err("every rank must fail");
            assert!(e.to_string().contains(words), "{words}: rank {r}: {e}");
        }
        let named = results
            .iter()
            .any(|r| matches!(r, Err(Error::Mismatch { what, .. }) if what.contains(words)));
        assert!(named, "{words}: {results:?}");
    }
}
