//! The tuner's trials and agreements, with the times of calls made up.

use super::*;

fn key(bytes: usize) -> Key {
    Key {
        collective: Collective::AllReduce,
        bucket_bytes: bytes,
        elem_size: 4,
    }
}

/// A size timed `trials` times, one call at a time.
const BIG: usize = 2 * SMALL_CALL_BYTES;

const ABC: [Algorithm; 3] = [Algorithm::Ring, Algorithm::Tree, Algorithm::Mesh];

/// Runs `us.len()` trial calls of `key`, timed `us`, and returns what ran and what
/// the last call's record asked the ranks to agree on.
fn run(t: &mut Tuner, key: Key, us: &[f64]) -> (Vec<Algorithm>, Option<Agree>) {
    let mut ran = Vec::new();
    let mut agree = None;
    for (call, us) in us.iter().enumerate() {
        assert_eq!(
            agree, None,
            "call {call}: an agreement before the last call"
        );
        let Next::Trial(a) = t.next(key, Algorithm::Ring, || ABC.to_vec()) else {
            panic!("call {call} settled before its trials ended");
        };
        ran.push(a);
        agree = t.record(&key, a, *us);
    }
    (ran, agree)
}

/// A block at 1 MiB with one trial: a warm-up, then a burst of five calls.
fn block(warm_up: f64, burst: [f64; BURST_CALLS]) -> Vec<f64> {
    [&[warm_up][..], &burst[..]].concat()
}

#[test]
fn candidates_run_in_blocks_and_passes_until_the_ranks_agree() {
    let mut t = Tuner::new(1);
    let mib = key(SMALL_CALL_BYTES);
    let [r, tr, m] = ABC;
    // Two passes, blocks of six, each first call a warm-up (the mesh's slow): ring
    // 30 then 22, tree 6 then 45, mesh 8 then 9. Faster passes: ring 22, tree 6,
    // mesh 8.
    let first = [
        block(50.0, [30.0; 5]),
        block(60.0, [5.0, 7.0, 6.0, 6.0, 6.0]),
        block(900.0, [8.0; 5]),
        block(50.0, [20.0, 24.0, 22.0, 22.0, 22.0]),
        block(60.0, [40.0, 50.0, 45.0, 45.0, 45.0]),
        block(90.0, [9.0; 5]),
    ];
    let (ran, agree) = run(&mut t, mib, &first.concat());
    let pass = [[r; 6], [tr; 6], [m; 6]].concat();
    assert_eq!(ran, [pass.clone(), pass].concat());
    assert_eq!(agree, Some(Agree::FirstPasses(vec![22.0, 6.0, 8.0])));
    // Another rank was slower on the tree: 9 against the mesh's 8, and the ring more
    // than 1.5 times the mesh's is dropped.
    assert_eq!(t.prune(&mib, &[22.0, 9.0, 8.0]), None);
    assert_eq!(t.upcoming(&mib), Some(Next::Trial(tr)), "not counted yet");
    assert_eq!(t.upcoming(&mib), Some(Next::Trial(tr)));
    assert_eq!(t.upcoming(&key(BIG)), None);
    // A third pass of the tree and the mesh: tree 6, mesh 7. The median passes:
    // tree 6 (6, 45, 6), mesh 8 (8, 9, 7).
    let third = [block(1.0, [6.0; 5]), block(1.0, [7.0; 5])].concat();
    let (ran, agree) = run(&mut t, mib, &third);
    assert_eq!(ran, [[tr; 6], [m; 6]].concat());
    assert_eq!(agree, Some(Agree::Final(vec![f64::INFINITY, 6.0, 8.0])));
    assert_eq!(t.settled(&mib), None);
    // Another rank was slower on the tree again: the agreed maxima make the mesh
    // cheapest.
    let (chosen, tried) = t.settle(&mib, &[f64::INFINITY, 9.0, 8.0]).unwrap();
    assert_eq!((chosen, tried), (Algorithm::Mesh, ABC.to_vec()));
    assert_eq!(t.settled(&mib), Some(Algorithm::Mesh));
    assert_eq!(
        t.next(mib, Algorithm::Ring, || panic!("asked again")),
        Next::Settled(Algorithm::Mesh)
    );
    // Other buckets are tried on their own.
    assert_eq!(
        t.next(key(BIG), Algorithm::Ring, || ABC.to_vec()),
        Next::Trial(Algorithm::Ring)
    );
}

#[test]
fn large_calls_take_the_candidates_in_turn_after_a_warm_up_pass() {
    let mut t = Tuner::new(2);
    let [_, tr, m] = ABC;
    // A warm-up pass (not counted), then 2 x 2 passes of one call each: ring 30, 22,
    // 25, 40; tree 6, 45, 7, 50; mesh 8, 9, 9, 10. Fastest calls: 22, 6, 8.
    let first = [
        [900.0, 900.0, 900.0],
        [30.0, 6.0, 8.0],
        [22.0, 45.0, 9.0],
        [25.0, 7.0, 9.0],
        [40.0, 50.0, 10.0],
    ];
    let (ran, agree) = run(&mut t, key(BIG), &first.concat());
    assert_eq!(ran, [ABC; 5].concat());
    assert_eq!(agree, Some(Agree::FirstPasses(vec![22.0, 6.0, 8.0])));
    // The ring is dropped; two more passes take the tree and the mesh in turn.
    assert_eq!(t.prune(&key(BIG), &[22.0, 9.0, 8.0]), None);
    let (ran, agree) = run(&mut t, key(BIG), &[6.0, 7.0, 8.0, 8.0]);
    assert_eq!(ran, [tr, m, tr, m]);
    // Medians of six calls: tree (6, 6, 7, 8, 45, 50) 7.5, mesh (7, 8, 8, 9, 9, 10) 8.5.
    assert_eq!(agree, Some(Agree::Final(vec![f64::INFINITY, 7.5, 8.5])));
    assert_eq!(
        t.settle(&key(BIG), &[f64::INFINITY, 7.5, 8.5]).unwrap().0,
        tr
    );
}

#[test]
fn first_passes_that_leave_one_candidate_settle_on_it() {
    let mut t = Tuner::new(1);
    let us = [1.0, 1.0, 1.0, 20.0, 10.0, 30.0, 25.0, 12.0, 8.0];
    let (_, agree) = run(&mut t, key(BIG), &us);
    assert_eq!(agree, Some(Agree::FirstPasses(vec![20.0, 10.0, 8.0])));
    let (chosen, _) = t.prune(&key(BIG), &[20.0, 10.0, 30.0]).unwrap();
    assert_eq!(chosen, Algorithm::Tree);
    assert_eq!(t.settled(&key(BIG)), Some(Algorithm::Tree));
}

#[test]
fn ties_go_to_the_model_order_and_nothing_to_try_settles_at_once() {
    let mut t = Tuner::new(1);
    let (_, agree) = run(&mut t, key(4 * BIG), &[4.0; 9]);
    assert_eq!(agree, Some(Agree::FirstPasses(vec![4.0; 3])));
    assert_eq!(t.prune(&key(4 * BIG), &[4.0; 3]), None);
    let (_, agree) = run(&mut t, key(4 * BIG), &[4.0; 3]);
    assert_eq!(agree, Some(Agree::Final(vec![4.0; 3])));
    assert_eq!(
        t.settle(&key(4 * BIG), &[4.0, 4.0, 3.0]).unwrap().0,
        Algorithm::Mesh
    );
    let mut t = Tuner::new(1);
    t.next(key(4 * BIG), Algorithm::Ring, || ABC.to_vec());
    assert_eq!(
        t.settle(&key(4 * BIG), &[4.0, 4.0, 4.0]).unwrap().0,
        Algorithm::Ring
    );
    // A wrong length or no finite time settles on the model's first candidate.
    for agreed in [&[1.0][..], &[f64::NAN; 3]] {
        let mut t = Tuner::new(1);
        t.next(key(4 * BIG), Algorithm::Ring, || ABC.to_vec());
        assert_eq!(t.settle(&key(4 * BIG), agreed).unwrap().0, Algorithm::Ring);
        assert_eq!(t.settled(&key(4 * BIG)), Some(Algorithm::Ring));
    }
    // Nothing that is not being tried settles.
    assert_eq!(t.settle(&key(32 * BIG), &[1.0]), None);
    assert_eq!(
        t.next(key(8 * BIG), Algorithm::Tree, Vec::new),
        Next::Settled(Algorithm::Tree)
    );
    assert_eq!(
        t.next(key(16 * BIG), Algorithm::Tree, || vec![Algorithm::Mesh]),
        Next::Settled(Algorithm::Mesh)
    );
    // A time for an algorithm not tried, or a bucket not tried, is ignored.
    assert_eq!(t.record(&key(16 * BIG), Algorithm::Ring, 1.0), None);
    assert_eq!(t.record(&key(64 * BIG), Algorithm::Ring, 1.0), None);
}

#[test]
fn a_later_candidate_must_be_faster_by_more_than_the_measurements_tell_apart() {
    let settle = |agreed: &[f64]| {
        let mut t = Tuner::new(1);
        t.next(key(BIG), Algorithm::Ring, || ABC.to_vec());
        t.settle(&key(BIG), agreed).unwrap().0
    };
    // Within TIE_TOLERANCE of the fastest, the model's order decides: the trials of 2
    // MiB on 2 shared-memory ranks timed the tree at 90.2 us and the ring at 90.8, and
    // the rounds after them 90.9 and 79.0.
    assert_eq!(settle(&[90.8, 90.2, 95.0]), Algorithm::Ring);
    assert_eq!(settle(&[f64::INFINITY, 90.8, 90.2]), Algorithm::Tree);
    // Faster by more, the faster one.
    assert_eq!(settle(&[100.0, 90.0, 95.0]), Algorithm::Tree);
    assert_eq!(settle(&[100.0, 99.0, 90.0]), Algorithm::Mesh);
}

#[test]
fn a_pass_is_timed_by_its_median_burst_as_the_regret_figure_times_rounds() {
    // A quarter of a MiB: blocks of a warm-up and four bursts of five calls.
    let quarter = key(SMALL_CALL_BYTES / 4);
    let mut t = Tuner::new(1);
    assert_eq!(t.block(&quarter), 1 + 4 * BURST_CALLS);
    // The ring's last burst of each pass waited on a descheduled rank (50 us a call
    // against 10): its mean pass is 20, its median burst 10. The tree took 15 throughout.
    let ring = [
        vec![100.0],
        vec![10.0; 3 * BURST_CALLS],
        vec![50.0; BURST_CALLS],
    ]
    .concat();
    let (tree, mesh) = (vec![15.0; 21], vec![30.0; 21]);
    let pass = [ring, tree, mesh].concat();
    let (_, agree) = run(&mut t, quarter, &[pass.clone(), pass].concat());
    assert_eq!(agree, Some(Agree::FirstPasses(vec![10.0, 15.0, 30.0])));
}

/// The calls among the first `calls` of `key` that start a burst.
fn burst_starts(trials: u32, key: Key, calls: usize) -> Vec<usize> {
    let mut t = Tuner::new(trials);
    assert!(!t.starts_burst(&key), "nothing handed out");
    (0..calls)
        .filter(|_| {
            t.next(key, Algorithm::Ring, || ABC.to_vec());
            t.starts_burst(&key)
        })
        .collect()
}

#[test]
fn bursts_start_after_each_blocks_warm_up() {
    // Above 1 MiB: every call, in turn (the warm-up pass's too).
    assert_eq!(burst_starts(2, key(BIG), 7), [0, 1, 2, 3, 4, 5, 6]);
    // At 1 MiB: a warm-up, then two bursts of five (blocks of eleven).
    assert_eq!(burst_starts(2, key(SMALL_CALL_BYTES), 23), [1, 6, 12, 17]);
}

#[test]
fn a_full_map_forgets_trials_before_choices() {
    let mut t = Tuner::new(1);
    let settled = key(BIG);
    t.next(settled, Algorithm::Ring, || vec![Algorithm::Tree]);
    for i in 1..BUCKET_LIMIT {
        t.next(key(BIG + i), Algorithm::Ring, || ABC.to_vec());
    }
    assert_eq!(t.entries.len(), BUCKET_LIMIT);
    assert_eq!(t.generation(), 0);
    t.next(key(2 * BIG), Algorithm::Ring, || ABC.to_vec());
    assert_eq!(t.entries.len(), 2, "the settled bucket and the new one");
    // What a caller kept of the forgotten buckets is stale.
    assert_eq!(t.generation(), 1);
    assert_eq!(t.settled(&settled), Some(Algorithm::Tree));
    // Every trial of a bucket fits what the bench waits for.
    let mut t = Tuner::new(3);
    let tiny = key(8);
    let mut calls = 0;
    while let Next::Trial(a) = t.next(tiny, Algorithm::Ring, || ABC.to_vec()) {
        calls += 1;
        match t.record(&tiny, a, 1.0) {
            Some(Agree::FirstPasses(v)) => assert_eq!(t.prune(&tiny, &v), None),
            Some(Agree::Final(v)) => assert!(t.settle(&tiny, &v).is_some()),
            None => {}
        }
    }
    // Three passes of three candidates, blocks of a warm-up and 3 x 8 bursts of 5.
    assert_eq!(calls, 3 * 3 * (3 * SMALL_CALL_SCALE * BURST_CALLS + 1));
    assert!(calls <= max_trial_calls(3), "{calls}");
}

#[test]
fn small_calls_are_timed_more_often() {
    let t = Tuner::new(3);
    assert_eq!(t.timed(&key(64 << 20)), 3);
    assert_eq!(t.timed(&key(BIG)), 3);
    assert_eq!(t.timed(&key(SMALL_CALL_BYTES)), 3 * BURST_CALLS);
    assert_eq!(t.timed(&key(SMALL_CALL_BYTES / 4)), 12 * BURST_CALLS);
    assert_eq!(t.timed(&key(8)), 3 * SMALL_CALL_SCALE * BURST_CALLS);
    assert_eq!(t.timed(&key(0)), 3 * SMALL_CALL_SCALE * BURST_CALLS);
    assert_eq!(mean(&[1.0, 2.0, 6.0]), 3.0);
    assert_eq!(mean(&[]), f64::INFINITY);
    assert_eq!(median(vec![9.0, 1.0, 5.0]), 5.0);
    assert_eq!(median(vec![1.0, 3.0]), 2.0);
}
