//! Where a 2-rank ring all_reduce in registered memory sends from and receives into: its
//! sends go from the caller's memory, and its all-gather half lands in place.

use rcoll::{Algorithm, Communicator, ReduceOp};

/// On 2 ranks an in-place ring all_reduce sends its own half and then fills it with the
/// peer's reduced half: the offers of that half go with the sends of it (behind the data
/// in the peer's slot), so every segment of it lands in place. Offered once the sends had
/// gone, the peer's reduced segment came first and landed in a slot (0-4 of 32 placed at
/// 8 MiB), to be copied out.
pub fn in_place_the_all_gather_half_lands_in_place(comm: &mut Communicator) {
    let count = 1 << 20;
    let r = comm.rank();
    let mut buf = comm.alloc::<f32>(count).expect("alloc");
    let half = (count / 2 * std::mem::size_of::<f32>()) as u64;
    let segments = half.div_ceil(comm.config().segment_bytes as u64);
    let calls = 3;
    let before = comm.statistics().placed_receives;
    for _ in 0..calls {
        buf.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = ((r + 1) * (i % 1000)) as f32);
        comm.with_algorithm(Algorithm::Ring)
            .all_reduce_in_place(&mut buf, ReduceOp::Sum)
            .expect("ring all_reduce in place");
        let bad = (0..count).find(|&i| buf[i] != (3 * (i % 1000)) as f32);
        assert_eq!(bad, None, "ring all_reduce in place on 2 ranks");
    }
    let placed = comm.statistics().placed_receives - before;
    println!("rank {r}: in place, {placed} of {calls} x {segments} segments written in place");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    // Windows are bound only behind nothing but binds, so offers wait for the sends there.
    if super::scenarios::offering() && var("RCOLL_IB_SCOPED") != "1" {
        assert_eq!(
            placed,
            calls * segments,
            "rank {r}: {placed} of the all-gather half's {calls} x {segments} segments landed in place"
        );
    }
}

/// On 2 ranks the ring's all_reduce sends twice: its own half of the input, then the half
/// it completes, reduced straight into the output and sent from there. With registered
/// buffers both go from the caller's memory: more zero-copy sends than the first half's
/// segments (before, the reduced half was reduced into its slot, copied to the output and
/// sent from the slot: exactly that many).
pub fn ring_sends_what_it_reduced_from_the_output(comm: &mut Communicator) {
    let count = 1 << 20;
    let mut src = comm.alloc::<f32>(count).expect("alloc");
    let mut dst = comm.alloc::<f32>(count).expect("alloc");
    let r = comm.rank();
    src.iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = ((r + 1) * (i % 1000)) as f32);
    let half = (count / 2 * std::mem::size_of::<f32>()) as u64;
    let segments = half.div_ceil(comm.config().segment_bytes as u64);
    let before = comm.statistics().zero_copy_sends;
    comm.with_algorithm(Algorithm::Ring)
        .all_reduce(&src, &mut dst, ReduceOp::Sum)
        .expect("ring all_reduce");
    let sent = comm.statistics().zero_copy_sends - before;
    let bad = (0..count).find(|&i| dst[i] != (3 * (i % 1000)) as f32);
    assert_eq!(bad, None, "ring all_reduce on 2 ranks");
    println!(
        "rank {r}: ring all_reduce, {sent} zero-copy sends of {segments} + {segments} segments"
    );
    assert!(
        sent > segments && sent <= 2 * segments,
        "rank {r}: {sent} zero-copy sends; the first half alone has {segments} segments"
    );
}
