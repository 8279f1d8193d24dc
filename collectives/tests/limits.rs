//! Values at the edges of what the API accepts: each is a clear error (or works), never a
//! panic, a capacity overflow or a truncation on the wire.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use rcoll::schedule::{Collective, Layout};
use rcoll::{process, Algorithm, Error, Rank};

/// A loopback address nobody listens on yet.
fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

/// A one-rank process group (it meets nobody) with `configure` applied.
fn one_rank(configure: impl FnOnce(process::Builder) -> process::Builder) -> rcoll::Result<()> {
    let b = process::Builder::new(0, 1, free_addr())
        .insecure_default_id()
        .transport(process::TransportKind::Tcp);
    configure(b).build().map(drop)
}

#[test]
fn a_timeout_too_large_for_the_clock_means_no_deadline() {
    one_rank(|b| b.timeout(Duration::MAX)).expect("Duration::MAX");
    one_rank(|b| b.timeout(Duration::from_secs_f64(1e19))).expect("1e19 s");
    // And a call under it.
    let mut comm = process::Builder::new(0, 1, free_addr())
        .insecure_default_id()
        .transport(process::TransportKind::Tcp)
        .timeout(Duration::MAX)
        .build()
        .expect("group");
    let mut x = vec![1.0f32; 10];
    comm.all_reduce_in_place(&mut x, rcoll::ReduceOp::Sum)
        .expect("all_reduce");
}

#[test]
fn a_segment_size_beyond_the_limit_is_a_config_error() {
    for bytes in [usize::MAX, usize::MAX - 16, (4usize << 30) + 1] {
        match one_rank(|b| b.segment_bytes(bytes)) {
            Err(Error::Config(text)) => assert!(text.contains("segment"), "{text}"),
            other => panic!("segment of {bytes} bytes: {other:?}"),
        }
    }
}

/// TCP alone moves segments of `tcp_segment_bytes(ranks)` unless a size is set (larger
/// ones for more than 2 ranks, every rank alike); a group with shared memory keeps the
/// default (its slots were sized by it).
#[test]
fn tcp_alone_takes_its_own_segment_size_unless_one_is_set() {
    use rcoll::config::{DEFAULT_SEGMENT_BYTES, TCP_SEGMENT_BYTES, TCP_SEGMENT_BYTES_MANY};
    let segment = |kind, bytes: Option<usize>| {
        let mut b = process::Builder::new(0, 1, free_addr())
            .insecure_default_id()
            .transport(kind);
        if let Some(bytes) = bytes {
            b = b.segment_bytes(bytes);
        }
        let mut comm = b.build().expect("group");
        let mut x = vec![1.0f32; 1 << 20];
        comm.all_reduce_in_place(&mut x, rcoll::ReduceOp::Sum)
            .expect("all_reduce");
        comm.config().segment_bytes
    };
    assert_ne!(TCP_SEGMENT_BYTES, DEFAULT_SEGMENT_BYTES);
    let tcp = process::TransportKind::Tcp;
    assert_eq!(segment(tcp, None), TCP_SEGMENT_BYTES);
    assert_eq!(segment(tcp, Some(64 << 10)), 64 << 10);
    assert_eq!(
        segment(tcp, Some(DEFAULT_SEGMENT_BYTES)),
        DEFAULT_SEGMENT_BYTES
    );
    let shm = process::TransportKind::Shm;
    assert_eq!(segment(shm, None), DEFAULT_SEGMENT_BYTES);
    // Three ranks over TCP: the larger segment, on every rank (they must cut alike).
    let root = free_addr();
    let ranks: Vec<_> = (0..3)
        .map(|r| {
            std::thread::spawn(move || {
                let mut comm = process::Builder::new(r, 3, root)
                    .insecure_default_id()
                    .transport(tcp)
                    .build()
                    .expect("group");
                let mut x = vec![1.0f32; 1 << 20];
                comm.all_reduce_in_place(&mut x, rcoll::ReduceOp::Sum)
                    .expect("all_reduce");
                assert!(x.iter().all(|&v| v == 3.0), "rank {r}: wrong sum");
                comm.config().segment_bytes
            })
        })
        .collect();
    for (r, h) in ranks.into_iter().enumerate() {
        assert_eq!(h.join().expect("rank"), TCP_SEGMENT_BYTES_MANY, "rank {r}");
    }
    assert_ne!(TCP_SEGMENT_BYTES_MANY, TCP_SEGMENT_BYTES);
}

#[test]
fn a_world_size_beyond_the_limit_is_an_error_not_an_allocation() {
    for size in [usize::MAX, 1 << 40, (u32::MAX as usize) + 2] {
        let e = process::Builder::new(0, size, free_addr())
            .insecure_default_id()
            .transport(process::TransportKind::Tcp)
            .timeout(Duration::from_secs(2))
            .build()
            .map(drop)
            .expect_err("no group of that size");
        let text = e.to_string();
        assert!(text.contains("ranks"), "{text}");
    }
}

#[test]
fn allocating_more_than_the_address_space_is_an_error() {
    let mut comms = rcoll::local::group(1).expect("group");
    let comm = &mut comms[0];
    for len in [usize::MAX, usize::MAX / 8, isize::MAX as usize / 8 + 1] {
        match comm.alloc::<f64>(len) {
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.contains("bytes") || text.contains("address space"),
                    "{text}"
                )
            }
            Ok(_) => panic!("allocated {len} f64"),
        }
    }
    // A real allocation still works.
    let b = comm.alloc::<f64>(1000).expect("alloc");
    assert_eq!(b.len(), 1000);
}

#[test]
fn schedules_of_an_impossible_layout_are_errors() {
    let bad = [
        Layout {
            collective: Collective::Broadcast,
            nranks: 3,
            count: 10,
            root: Rank(5),
            in_place: false,
        },
        Layout {
            collective: Collective::AllReduce,
            nranks: 0,
            count: 10,
            root: Rank(0),
            in_place: false,
        },
        Layout {
            collective: Collective::AllGather,
            nranks: 4,
            count: usize::MAX / 2,
            root: Rank(0),
            in_place: false,
        },
    ];
    for layout in bad {
        for algorithm in Algorithm::ALL {
            if let Ok(s) = algorithm.schedule(&layout, Rank(0)) {
                panic!(
                    "{algorithm} scheduled {layout:?}: {} channels",
                    s.channels.len()
                );
            }
        }
    }
    let mut comms = rcoll::local::group(2).expect("group");
    // A root out of range picks nothing, and panics nowhere.
    let _ = comms[0].algorithm_for::<f32>(Collective::Broadcast, 10, 7, false);
}
