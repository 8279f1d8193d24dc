//! Algorithm selection: the cost model by default, forced per communicator (builder or
//! `RCOLL_ALGO`, tested in `config`) where the algorithm applies, and per call.

mod common;

use std::time::Duration;

use rcoll::{Algorithm, Collective, ReduceOp};

use common::on_ranks;

const T: Duration = Duration::from_secs(30);

#[test]
fn a_communicator_wide_choice_applies_where_the_algorithm_serves() {
    let results = on_ranks(4, Some(Algorithm::DoubleBinaryTree), T, |comm| {
        (
            comm.algorithm_for::<f32>(Collective::AllReduce, 1 << 20, 0, false),
            comm.algorithm_for::<f32>(Collective::AllToAll, 1 << 10, 0, false),
        )
    });
    for (all_reduce, all_to_all) in results {
        assert_eq!(all_reduce, Algorithm::DoubleBinaryTree);
        assert!(
            all_to_all.serves(Collective::AllToAll),
            "falls back to the cost model: {all_to_all}"
        );
    }
}

#[test]
fn auto_makes_the_same_choice_on_every_rank() {
    let results = on_ranks(5, None, T, |comm| {
        [8usize, 4096, 1 << 22]
            .map(|count| comm.algorithm_for::<f64>(Collective::AllReduce, count, 0, false))
    });
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
}

#[test]
fn a_per_call_choice_applies_to_that_call_only() {
    let results = on_ranks(3, Some(Algorithm::Ring), T, |comm| {
        let mut v = vec![1u32; 10];
        let forced = comm
            .with_algorithm(Algorithm::Mesh)
            .all_reduce_in_place(&mut v, ReduceOp::Sum);
        // The next call is back to the communicator's choice...
        let after = comm.algorithm_for::<u32>(Collective::AllReduce, 10, 0, false);
        // ...also when a per-call choice is made and dropped unused.
        drop(comm.with_algorithm(Algorithm::Tree));
        let dropped = comm.algorithm_for::<u32>(Collective::AllReduce, 10, 0, false);
        (forced.map(|_| v), after, dropped)
    });
    for (forced, after, dropped) in results {
        assert_eq!(forced.unwrap(), vec![3u32; 10]);
        assert_eq!(after, Algorithm::Ring);
        assert_eq!(
            dropped,
            Algorithm::Ring,
            "an unused per-call choice does not leak"
        );
    }
}
