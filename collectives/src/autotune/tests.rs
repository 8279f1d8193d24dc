//! The tuner's trials, agreements and probes, with the times of calls made up.

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

/// Settles `key` on `agreed` after one call (the trials' times do not matter here).
fn settled_on(t: &mut Tuner, key: Key, agreed: &[f64]) -> Algorithm {
    t.next(key, Algorithm::Ring, || ABC.to_vec());
    t.settle(&key, agreed).expect("being tried").0
}

/// Feeds `key`'s watched calls the time `us` until a window ends, each running `runs`;
/// returns this rank's time of the window and the calls it took.
fn window(t: &mut Tuner, key: Key, runs: Algorithm, us: f64) -> (f64, usize) {
    for calls in 1..=MAX_WINDOW_CALLS {
        let next = t.next(key, Algorithm::Mesh, || panic!("asked again"));
        assert_eq!(next, Next::Settled(runs), "call {calls}");
        if let Some(time) = t.watched(&key, us) {
            return (time, calls);
        }
    }
    panic!("no window ended");
}

/// Runs one window of `key` with `runs`, timed `us`, and returns what the ranks' agreement
/// on it changed.
fn step(t: &mut Tuner, key: Key, runs: Algorithm, us: f64) -> Option<Probe> {
    window(t, key, runs, us);
    t.check(&key, us)
}

/// Runs the windows of a probe under way on `key` until it ends, each finalist's window
/// timed `us(algorithm, step)`; returns the algorithms in the order they ran, the calls of
/// each window, and the end.
fn probe(
    t: &mut Tuner,
    key: Key,
    us: impl Fn(Algorithm, usize) -> f64,
) -> (Vec<Algorithm>, usize, Probe) {
    let mut ran = Vec::new();
    let mut calls = Vec::new();
    let mut runs = match t.upcoming(&key) {
        Some(Next::Settled(a)) => a,
        other => panic!("not settled: {other:?}"),
    };
    loop {
        let time = us(runs, ran.len());
        calls.push(window(t, key, runs, time).1);
        ran.push(runs);
        match t.check(&key, time) {
            Some(Probe::Runs(next)) => runs = next,
            Some(end) => {
                calls.dedup();
                assert_eq!(calls.len(), 1, "windows of one length: {calls:?}");
                return (ran, calls[0], end);
            }
            None => panic!("the probe stopped without an end after {ran:?}"),
        }
    }
}

fn ended(medians: &[(Algorithm, f64)], chosen: Algorithm) -> Probe {
    Probe::Ended {
        medians: medians.to_vec(),
        chosen,
    }
}

#[test]
fn a_close_choice_whose_calls_slow_down_is_probed_against_its_contenders() {
    let mut t = Tuner::new(2);
    let big = key(BIG);
    let [r, tr, _] = ABC;
    // The ring 100 us, the tree 104 (a tie: the model's first wins, and the tree
    // contends), the mesh 300 (not within CONTEND_SPREAD).
    assert_eq!(settled_on(&mut t, big, &[100.0, 104.0, 300.0]), r);
    assert!(t.watching(&big));
    // The first window: 8 calls (one at a time: bursts of one).
    assert_eq!(window(&mut t, big, r, 100.0), (100.0, WINDOW_BURSTS));
    // Within DRIFT of the trials' 100 us: nothing to probe.
    assert_eq!(t.check(&big, 119.0), None);
    // Slower by more (a window of 16 calls): a probe, the ring first, while it stays the
    // choice. Rounds of a window each, every other one reversed; windows of a quarter of
    // 16 calls (the first window, 8 calls, would give 2: PROBE_BURSTS).
    assert_eq!(step(&mut t, big, r, 160.0), Some(Probe::Runs(r)));
    assert_eq!(t.settled(&big), Some(r));
    let times = |a: Algorithm, step: usize| match a == r {
        true => [130.0, 250.0, 128.0, 131.0][step / 2],
        false => 100.0,
    };
    let (ran, calls, end) = probe(&mut t, big, times);
    assert_eq!(ran, [r, tr, tr, r, r, tr, tr, r]);
    assert_eq!(calls, 4);
    // The tree's median 100 against the ring's 130.5 (its 250 left out; the 160 that
    // started the probe does not count): the tree is the choice.
    assert_eq!(end, ended(&[(r, 130.5), (tr, 100.0)], tr));
    assert_eq!(t.settled(&big), Some(tr));
    assert_eq!(t.upcoming(&big), Some(Next::Settled(tr)));
    // Its next window sets its time (not the probe's 100: it won on the fastest of two
    // medians); the second may probe the ring, now its contender.
    assert_eq!(window(&mut t, big, tr, 115.0).1, WINDOW_BURSTS);
    assert_eq!(t.check(&big, 115.0), None);
    assert_eq!(step(&mut t, big, tr, 140.0), Some(Probe::Runs(tr)));
    let times = |a: Algorithm, _: usize| if a == tr { 115.0 } else { 112.0 };
    // The ring within TIE_TOLERANCE of the tree: the tree stays.
    let (ran, _, end) = probe(&mut t, big, times);
    assert_eq!(ran, [tr, r, r, tr, tr, r, r, tr]);
    assert_eq!(end, ended(&[(tr, 115.0), (r, 112.0)], tr));
    assert_eq!(t.settled(&big), Some(tr));
}

#[test]
fn a_contender_must_beat_the_choices_median_in_the_probe_not_the_slow_window() {
    let mut t = Tuner::new(1);
    let big = key(BIG);
    let [r, tr, m] = ABC;
    settled_on(&mut t, big, &[1000.0, 1100.0, 1200.0]);
    // Two contenders, the tree first (faster in the trials).
    assert_eq!(window(&mut t, big, r, 2000.0).1, WINDOW_BURSTS);
    assert_eq!(t.check(&big, 2000.0), Some(Probe::Runs(r)));
    // The tree and the mesh beat the 2 ms that started the probe, not the ring's windows
    // in it.
    let times = |a: Algorithm, _: usize| match a {
        Algorithm::Ring => 1480.0,
        Algorithm::Tree => 1500.0,
        _ => 1600.0,
    };
    let (ran, calls, end) = probe(&mut t, big, times);
    assert_eq!(ran, [r, tr, m, m, tr, r, r, tr, m, m, tr, r]);
    assert_eq!(calls, PROBE_BURSTS);
    assert_eq!(end, ended(&[(r, 1480.0), (tr, 1500.0), (m, 1600.0)], r));
    // The ring's time is its median in the probe: within DRIFT of 1.48 ms, nothing; past
    // it (and past the gap of 2 windows), a probe.
    assert_eq!(step(&mut t, big, r, 1700.0), None);
    assert_eq!(step(&mut t, big, r, 1700.0), None);
    assert_eq!(step(&mut t, big, r, 1800.0), Some(Probe::Runs(r)));
}

#[test]
fn a_machine_that_slows_down_during_a_probe_slows_every_finalist_alike() {
    let mut t = Tuner::new(1);
    let big = key(BIG);
    let [r, tr, _] = ABC;
    settled_on(&mut t, big, &[1000.0, 1010.0, 1020.0]);
    assert_eq!(step(&mut t, big, r, 1500.0), Some(Probe::Runs(r)));
    // Every algorithm as fast as the others, the machine 10 % slower each window. Run
    // one window each, the choice last (or first), the choice would lose (win) by 20 %.
    let (ran, _, end) = probe(&mut t, big, |_, step| 1000.0 * (1.0 + 0.1 * step as f64));
    assert_eq!(ran.len(), PROBE_ROUNDS * 3);
    let Probe::Ended { medians, chosen } = end else {
        panic!("{end:?}");
    };
    assert_eq!(chosen, r, "{medians:?}");
    let spread = medians.iter().map(|m| m.1).fold(0.0, f64::max)
        / medians.iter().map(|m| m.1).fold(f64::INFINITY, f64::min);
    assert!(spread < 1.0 + TIE_TOLERANCE, "{medians:?}");
    // The same steady slowdown with the tree 10 % faster throughout: it takes over.
    assert_eq!(step(&mut t, big, r, 1000.0), None);
    assert_eq!(step(&mut t, big, r, 5000.0), Some(Probe::Runs(r)));
    let slower = |a: Algorithm, step: usize| {
        let base = if a == tr { 900.0 } else { 1000.0 };
        base * (1.0 + 0.1 * step as f64)
    };
    let (_, _, end) = probe(&mut t, big, slower);
    assert!(
        matches!(end, Probe::Ended { chosen, .. } if chosen == tr),
        "{end:?}"
    );
    assert_eq!(t.settled(&big), Some(tr));
}

#[test]
fn a_contender_far_slower_than_the_choice_in_a_round_leaves_the_probe() {
    let mut t = Tuner::new(1);
    let big = key(BIG);
    let [r, tr, m] = ABC;
    settled_on(&mut t, big, &[1000.0, 1050.0, 1100.0]);
    assert_eq!(step(&mut t, big, r, 5000.0), Some(Probe::Runs(r)));
    // The tree 1.3 times the ring in the first round: the other rounds run the ring and
    // the mesh, which takes over (its median 950 against 1000).
    let times = |a: Algorithm, _: usize| match a {
        Algorithm::Ring => 1000.0,
        Algorithm::Tree => 1300.0,
        _ => 950.0,
    };
    let (ran, _, end) = probe(&mut t, big, times);
    assert_eq!(ran, [r, tr, m, m, r, r, m, m, r]);
    assert_eq!(end, ended(&[(r, 1000.0), (tr, 1300.0), (m, 950.0)], m));
    // Both contenders that much slower (in the round, not against the trials): the probe
    // ends after one round, the choice kept.
    assert_eq!(step(&mut t, big, m, 950.0), None);
    assert_eq!(step(&mut t, big, m, 950.0), None);
    assert_eq!(step(&mut t, big, m, 5000.0), Some(Probe::Runs(m)));
    let times = |a: Algorithm, step: usize| match a {
        Algorithm::Mesh => 3000.0,
        _ => 3000.0 * 1.3 + step as f64,
    };
    let (ran, _, end) = probe(&mut t, big, times);
    assert_eq!(ran, [m, tr, r]);
    assert_eq!(end, ended(&[(m, 3000.0), (tr, 3901.0), (r, 3902.0)], m));
}

#[test]
fn every_step_of_a_probe_and_no_other_window_moves_the_generation() {
    let mut t = Tuner::new(1);
    let big = key(BIG);
    let r = ABC[0];
    settled_on(&mut t, big, &[1000.0, 1100.0, 1200.0]);
    let g = t.generation();
    assert_eq!(step(&mut t, big, r, 1000.0), None);
    assert_eq!(t.generation(), g, "a window without a probe");
    assert_eq!(step(&mut t, big, r, 5000.0), Some(Probe::Runs(r)));
    let mut moved = vec![t.generation() - g];
    while let Some(Next::Settled(runs)) = t.upcoming(&big) {
        let before = t.generation();
        let end = step(&mut t, big, runs, 1000.0);
        moved.push(t.generation() - before);
        if matches!(end, Some(Probe::Ended { .. })) {
            break;
        }
    }
    // The window that started it, each of the probe's 12 windows (3 finalists, 4 rounds).
    assert_eq!(moved, vec![1; 1 + PROBE_ROUNDS * 3]);
}

#[test]
fn each_probe_doubles_the_windows_before_the_next() {
    let mut t = Tuner::new(1);
    let big = key(BIG);
    let r = ABC[0];
    settled_on(&mut t, big, &[1000.0, 1100.0, 1200.0]);
    for gap in [1, 2, 4, 8] {
        for w in 1..gap {
            assert_eq!(step(&mut t, big, r, 5000.0), None, "gap {gap}, window {w}");
        }
        assert_eq!(
            step(&mut t, big, r, 50_000.0),
            Some(Probe::Runs(r)),
            "gap {gap}"
        );
        let times = |a: Algorithm, _: usize| if a == r { 5000.0 } else { 6000.0 };
        let (_, _, end) = probe(&mut t, big, times);
        assert!(matches!(end, Probe::Ended { chosen, .. } if chosen == r));
    }
}

#[test]
fn clear_or_fast_choices_are_not_watched() {
    let mut t = Tuner::new(1);
    // No candidate within CONTEND_SPREAD of the choice.
    settled_on(&mut t, key(BIG), &[100.0, 126.0, 300.0]);
    assert!(!t.watching(&key(BIG)));
    assert_eq!(t.watched(&key(BIG), 1e6), None);
    assert_eq!(t.check(&key(BIG), 1e6), None);
    // Calls faster than WATCH_MIN_US.
    settled_on(&mut t, key(64), &[5.0, 5.1, 5.2]);
    assert!(!t.watching(&key(64)));
    // Small calls are watched in whole bursts of five.
    settled_on(&mut t, key(1024), &[12.0, 12.5, 40.0]);
    let (_, calls) = window(&mut t, key(1024), Algorithm::Ring, 12.0);
    assert_eq!(calls, WINDOW_BURSTS * BURST_CALLS);
    // Dropped after the first passes (infinite), never a contender.
    settled_on(&mut t, key(2048), &[100.0, f64::INFINITY, 300.0]);
    assert!(!t.watching(&key(2048)));
}

#[test]
fn windows_grow_from_a_few_bursts_to_about_50_ms_and_start_again_after_a_probe() {
    let mut t = Tuner::new(1);
    let small = key(1024);
    let [r, _, _] = ABC;
    settled_on(&mut t, small, &[12.0, 12.5, 40.0]);
    // 8 bursts of five, twice as many each window, up to 50 ms at 12 us: 4,167 calls,
    // in whole bursts.
    let longest = (50_000usize / 12 + 1).div_ceil(BURST_CALLS) * BURST_CALLS;
    let mut want = WINDOW_BURSTS * BURST_CALLS;
    for _ in 0..10 {
        let (_, calls) = window(&mut t, small, r, 12.0);
        assert_eq!(calls, want);
        assert_eq!(t.check(&small, 12.0), None);
        want = (want * 2).min(longest);
    }
    assert_eq!(want, longest);
    // A probe's windows are a quarter of the one that started it, in whole bursts; after
    // it, 8 bursts again.
    assert_eq!(step(&mut t, small, r, 20.0), Some(Probe::Runs(r)));
    let (_, calls, _) = probe(&mut t, small, |_, _| 12.0);
    assert_eq!(calls, longest / BURST_CALLS / PROBE_ROUNDS * BURST_CALLS);
    assert_eq!(
        window(&mut t, small, r, 12.0).1,
        WINDOW_BURSTS * BURST_CALLS
    );
}
