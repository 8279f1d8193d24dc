//! What mismatch detection costs per call, beside the call it protects.
//!
//! Detection adds, per collective: computing the call's fingerprint (carried in the tags
//! the engine writes anyway, so no extra bytes travel) and one scan of the arrival map for
//! stale messages (empty when all is well). Both are measured here, next to an 8-byte
//! all_reduce between two threads (the cheapest collective rcoll runs); the closing note of
//! the TCP issue reports the ratio. `cargo bench -p rcoll --bench mismatch`.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rcoll::fingerprint::Call;
use rcoll::{Algorithm, Collective, DataType, ReduceOp};
use rcoll_transport::Group;

fn overhead(c: &mut Criterion) {
    let call = Call {
        collective: Collective::AllReduce,
        dtype: DataType::F32,
        op: ReduceOp::Sum,
        algorithm: Some(Algorithm::Mesh),
        count: 2,
        root: 0,
        segment_elems: 32768,
        levels: None,
    };
    c.bench_function("fingerprint", |b| {
        b.iter(|| black_box(black_box(call).fingerprint()))
    });

    let mut transport = rcoll_transport::local::group(2, 64).remove(0);
    c.bench_function("stale_check_empty", |b| {
        b.iter(|| black_box(transport.stale(black_box(7))))
    });

    // An 8-byte all_reduce between two threads: one thread is rank 1 in a loop, this one
    // is rank 0 under criterion; they stop when rank 0's communicator is dropped.
    let mut comms = rcoll::local::group(2).expect("group");
    let mut peer = comms.pop().expect("rank 1");
    let mut me = comms.pop().expect("rank 0");
    let partner = std::thread::spawn(move || {
        let mut v = [1.0f32; 2];
        while peer.all_reduce_in_place(&mut v, ReduceOp::Sum).is_ok() {}
    });
    c.bench_function("all_reduce_8_bytes_2_threads", |b| {
        let mut v = [1.0f32; 2];
        b.iter(|| {
            me.all_reduce_in_place(&mut v, ReduceOp::Sum)
                .expect("all_reduce")
        });
    });
    drop(me);
    let _ = partner.join();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = overhead
}
criterion_main!(benches);
