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

/// Over shared memory a rank reads what it only copies straight from the sender's memory
/// (single copy), so a root that sends to every peer at once is not their bottleneck:
/// with `receivers_read`, a single_root broadcast of 1 MiB on 4 ranks of one host is
/// priced as one transfer, below the ring's; without, as three. A collective that reduces
/// is priced alike either way (its messages go through the rings, copied by both sides).
#[test]
fn receivers_that_read_the_senders_memory_make_a_fan_out_cost_one_transfer() {
    use rcoll::schedule::cost::{cost_levels, CostModel, Levels};
    use rcoll::schedule::Layout;
    use rcoll_transport::hosts::HostMap;
    let hosts = HostMap::single(4);
    let model = CostModel::shared_memory();
    // Out of cache (see `CostModel::cache_speedup`).
    let bytes = 4usize << 20;
    let layout = |collective| Layout {
        collective,
        nranks: 4,
        count: bytes / 4,
        root: rcoll::Rank::from(0usize),
        in_place: true,
    };
    let price = |a: Algorithm, collective, receivers_read| {
        let schedules = a.schedules_on(&layout(collective), Some(&hosts)).unwrap();
        let levels = Levels {
            hosts: &hosts,
            local: model,
            receivers_read,
            level_algorithms: None,
        };
        cost_levels(&schedules, 4, &model, Some(&levels)).predicted_us
    };
    let transfer = 8.0 * bytes as f64 / (model.bandwidth_gbps * 1e3);
    // Either way the root posts three messages.
    let round = model.alpha_us + 3.0 * model.overhead_us;
    let fan_out = price(Algorithm::SingleRoot, Collective::Broadcast, true);
    assert!((fan_out - (round + transfer)).abs() < 1e-6, "{fan_out}");
    let copied = price(Algorithm::SingleRoot, Collective::Broadcast, false);
    assert!((copied - (round + 3.0 * transfer)).abs() < 1e-6, "{copied}");
    assert!(fan_out < price(Algorithm::Ring, Collective::Broadcast, true));
    for a in [Algorithm::SingleRoot, Algorithm::Mesh, Algorithm::Ring] {
        assert_eq!(
            price(a, Collective::AllReduce, true),
            price(a, Collective::AllReduce, false),
            "{a}"
        );
    }
}

/// The hierarchical schedule's levels are chosen each with its own rates: on 2 hosts of 4
/// ranks, an 8-byte all_reduce reduces inside a host in fewer rounds than the ring's 3,
/// which the whole schedule's price confirms; the choice is the same on every rank of a
/// communicator, and `RCOLL_LEVEL_ALGO` forces it.
#[test]
fn hierarchical_levels_are_chosen_per_level() {
    use rcoll::algorithm::hierarchical::LevelAlgorithms;
    use rcoll::schedule::cost::{cost_levels, CostModel, Levels};
    use rcoll::select::choose_levels;
    use rcoll_transport::hosts::HostMap;
    let hosts = HostMap::blocks(&[4, 4]);
    let (network, shm) = (CostModel::tcp(), CostModel::shared_memory());
    let levels = Levels {
        hosts: &hosts,
        local: shm,
        receivers_read: true,
        level_algorithms: None,
    };
    let layout = |count: usize| rcoll::schedule::Layout {
        collective: Collective::AllReduce,
        nranks: 8,
        count,
        root: rcoll::Rank::from(0usize),
        in_place: false,
    };
    let price = |count: usize, lv: LevelAlgorithms| {
        let all = Algorithm::Hierarchical
            .schedules_levels(&layout(count), Some(&hosts), lv)
            .unwrap();
        cost_levels(&all, 4, &network, Some(&levels))
    };
    let small = choose_levels(&layout(2), &hosts, 4, &network, &shm, true);
    assert_ne!(small.local, Algorithm::Ring, "{small}");
    let (chosen, ring) = (price(2, small), price(2, LevelAlgorithms::default()));
    assert!(
        chosen.steps < ring.steps && chosen.predicted_us < ring.predicted_us,
        "{small}: {chosen:?} against ring/ring {ring:?}"
    );
    // Large vectors: whatever each level takes, the whole is priced no worse than rings.
    let count = 16 << 20;
    let large = choose_levels(&layout(count), &hosts, 4, &network, &shm, true);
    let (chosen, ring) = (
        price(count, large),
        price(count, LevelAlgorithms::default()),
    );
    assert!(
        chosen.predicted_us <= ring.predicted_us * 1.01,
        "{large}: {chosen:?} against ring/ring {ring:?}"
    );
    // A forced pair is taken as it is.
    let forced: LevelAlgorithms = "binomial_tree/mesh".parse().unwrap();
    assert_eq!(
        rcoll::select::level_algorithms(
            &layout(2),
            4,
            &network,
            &Levels {
                level_algorithms: Some(forced),
                ..levels
            }
        ),
        forced
    );
    assert!("double_binary_tree/ring"
        .parse::<LevelAlgorithms>()
        .is_err());
    assert!("ring".parse::<LevelAlgorithms>().is_err());
}

/// Every message a rank sends or receives costs it `overhead_us`: mesh's one round of
/// p-1 messages each way is priced alpha + 2(p-1) o, and at 8 bytes `auto` leaves it for
/// recursive doubling's log2 p rounds of one message each way once p-1 messages cost
/// more than the rounds saved (32 and 64 ranks on the default rates), not on 4 ranks.
#[test]
fn each_message_end_costs_its_rank_the_overhead() {
    use rcoll::schedule::cost::{cost, CostModel};
    use rcoll::schedule::Layout;
    use rcoll::select::rank_algorithms;
    let model = CostModel::default();
    let layout = |nranks| Layout {
        collective: Collective::AllReduce,
        nranks,
        count: 2,
        root: rcoll::Rank::from(0usize),
        in_place: false,
    };
    let beta = 8.0 / (model.bandwidth_gbps * 1e3);
    let gamma = 1.0 / (model.reduce_gbytes_per_s * 1e3);
    let mesh = cost(&Algorithm::Mesh.schedules(&layout(4)).unwrap(), 4, &model);
    // Sends 3 x 8 bytes, receives 3 and reduces them.
    let want = model.alpha_us + 6.0 * model.overhead_us + beta * 24.0 + gamma * 24.0;
    assert!((mesh.predicted_us - want).abs() < 1e-9, "{mesh:?}");
    let rd = Algorithm::RecursiveDoubling;
    let doubling = cost(&rd.schedules(&layout(4)).unwrap(), 4, &model);
    let want = 2.0 * (model.alpha_us + 2.0 * model.overhead_us + beta * 8.0 + gamma * 8.0);
    assert!((doubling.predicted_us - want).abs() < 1e-9, "{doubling:?}");
    let best = |n| rank_algorithms(&layout(n), 4, &model, None)[0].0;
    assert_eq!(best(4), Algorithm::Mesh);
    assert_eq!(best(32), rd);
    assert_eq!(best(64), rd);
}

/// Four ranks on a host with two CPUs take turns on them: a round lasts at least every
/// message end of the ranks a CPU holds, each costing `o + switch`. Then an
/// 8-byte all_reduce goes cheapest in two rounds of one message per rank (single_root:
/// 12 ends in all) rather than one round of three (mesh: 24); with four CPUs, mesh's one
/// round wins as before. Without known CPUs, nothing changes.
#[test]
fn a_host_with_fewer_cpus_than_ranks_prices_its_ranks_taking_turns() {
    use rcoll::schedule::cost::{cost_levels, CostModel, Levels};
    use rcoll::schedule::Layout;
    use rcoll_transport::hosts::HostMap;
    let model = CostModel::tcp_loopback();
    let layout = Layout {
        collective: Collective::AllReduce,
        nranks: 4,
        count: 2,
        root: rcoll::Rank::from(0usize),
        in_place: true,
    };
    let price = |a: Algorithm, hosts: &HostMap| {
        let schedules = a.schedules_on(&layout, Some(hosts)).unwrap();
        let levels = Levels {
            hosts,
            local: model,
            receivers_read: false,
            level_algorithms: None,
        };
        cost_levels(&schedules, 4, &model, Some(&levels)).predicted_us
    };
    let unknown = HostMap::single(4);
    let two = HostMap::single(4).with_cpus(vec![2]);
    let four = HostMap::single(4).with_cpus(vec![4]);
    assert!(!four.crowded() && two.crowded());
    for a in [
        Algorithm::Mesh,
        Algorithm::SingleRoot,
        Algorithm::RecursiveDoubling,
    ] {
        assert_eq!(
            price(a, &unknown),
            price(a, &four),
            "{a}: enough CPUs change nothing"
        );
    }
    // Mesh: one round in which each of the 4 ranks sends 3 and receives 3.
    let turns = 24.0 * (model.overhead_us + model.switch_us) / 2.0;
    let mesh = price(Algorithm::Mesh, &two);
    assert!(mesh >= turns, "mesh on 2 CPUs {mesh} < {turns}");
    assert!(price(Algorithm::SingleRoot, &two) < mesh);
    assert!(price(Algorithm::RecursiveDoubling, &two) < mesh);
    assert!(price(Algorithm::Mesh, &four) < price(Algorithm::SingleRoot, &four));
    assert!(price(Algorithm::Mesh, &four) < price(Algorithm::RecursiveDoubling, &four));
}

/// A crowded host's CPUs copy and reduce for all the ranks they hold (local rank i on CPU
/// i mod cpus). On 3 ranks and 2 CPUs, a ring keeps both ranks of CPU 0 busy in every
/// round, while halving-doubling's fold idles one of them after its first message: at
/// 64 MiB over loopback TCP the fold ran 1.3 times faster (49 ms against 64 ms), and the
/// model must say so. With a CPU per rank the ring stays the cheaper, as it ran there. On
/// 4 ranks, where every schedule copies alike per CPU, the double binary tree (whose
/// busiest rank does twice the work) is not the cheapest; and over TCP, where two ranks
/// of one CPU exchange at a higher cost per byte, the ring (whose neighbours are on
/// different CPUs) is cheaper than halving-doubling.
#[test]
fn a_crowded_hosts_busiest_cpu_bounds_each_round() {
    use rcoll::schedule::cost::{cost_levels, CostModel, Levels};
    use rcoll::schedule::Layout;
    use rcoll_transport::hosts::HostMap;
    let price_bytes = |a: Algorithm, n, cpus, local, reads, bytes: usize| {
        let hosts = HostMap::single(n).with_cpus(vec![cpus]);
        let layout = Layout {
            collective: Collective::AllReduce,
            nranks: n,
            count: bytes / 4,
            root: rcoll::Rank::from(0usize),
            in_place: false,
        };
        let schedules = a.schedules_on(&layout, Some(&hosts)).unwrap();
        let levels = Levels {
            hosts: &hosts,
            local,
            receivers_read: reads,
            level_algorithms: None,
        };
        cost_levels(&schedules, 4, &CostModel::tcp(), Some(&levels)).predicted_us
    };
    let price = |a, n, cpus, local, reads| price_bytes(a, n, cpus, local, reads, 64 << 20);
    let (hd, ring, dbt) = (
        Algorithm::HalvingDoubling,
        Algorithm::Ring,
        Algorithm::DoubleBinaryTree,
    );
    // Asserts that `a` prices below `b`.
    let cheaper = |what: &str, a: Algorithm, b: Algorithm, at: &dyn Fn(Algorithm) -> f64| {
        let (x, y) = (at(a), at(b));
        assert!(x < y, "{what}: {a} {x} >= {b} {y}");
    };
    for (local, reads) in [
        (CostModel::tcp_loopback(), false),
        (CostModel::shared_memory(), true),
    ] {
        cheaper("3 ranks on 2 CPUs", hd, ring, &|a| {
            price(a, 3, 2, local, reads)
        });
        cheaper("3 ranks on 3 CPUs", ring, hd, &|a| {
            price(a, 3, 3, local, reads)
        });
        // The cheapest on 4 ranks and 2 CPUs: halving-doubling over shared memory, the ring
        // over TCP.
        let best = match reads {
            true => hd,
            false => ring,
        };
        cheaper("4 ranks on 2 CPUs", best, dbt, &|a| {
            price(a, 4, 2, local, reads)
        });
    }
    // Over loopback TCP, a transfer between two ranks of one CPU costs it more per byte
    // than one between two CPUs: on 4 ranks (0 and 2 on one CPU, 1 and 3 on the other),
    // halving-doubling's first exchange, of half the vector, stays on each CPU, while
    // every ring neighbour is on the other CPU. The ring ran 1.1-1.2 times faster there
    // (64 MiB: 72-75 ms against 84). Over shared memory halving-doubling stays ahead.
    let tcp = CostModel::tcp_loopback();
    cheaper("TCP, 4 ranks on 2 CPUs", ring, hd, &|a| {
        price(a, 4, 2, tcp, false)
    });
    // Small messages stay in the caches: at 32 KiB the single root, whose root shares its
    // CPU with one of the senders, ran fastest on 4 ranks and 2 CPUs (41 us, against the
    // double binary tree's 72).
    let small = |a| price_bytes(a, 4, 2, tcp, false, 32 << 10);
    cheaper("TCP, 32 KiB", Algorithm::SingleRoot, dbt, &small);
    let shm = CostModel::shared_memory();
    cheaper("shared memory, 4 ranks on 2 CPUs", hd, ring, &|a| {
        price(a, 4, 2, shm, true)
    });
}

/// Between ranks that share memory, a vector that stays in cache is copied and reduced
/// several times as fast as one that does not, so fewer rounds win up to larger sizes. On
/// 4 ranks and 2 CPUs over shared memory, the single root (2 rounds) ran 1.35-1.7 times as
/// fast as halving-doubling (4 rounds) at 16 and 32 KiB in two runs (7.2-7.4 us against
/// 11.2-11.7, and 9.0 against 12.2-12.3), recursive doubling (2 rounds) within 1.08 of
/// it, and halving-doubling stays the faster at 64 MiB (16.5 ms against 18.3). Rates measured over every size (a tuning file's) have no
/// separate cache rate: pricing leaves them as they are.
#[test]
fn a_vector_in_cache_moves_at_cache_speed_between_ranks_that_share_memory() {
    use rcoll::schedule::cost::{CostModel, Levels, CACHED_VECTOR};
    use rcoll::schedule::Layout;
    use rcoll_transport::hosts::HostMap;
    let hosts = HostMap::single(4).with_cpus(vec![2]);
    let layout = |bytes: usize| Layout {
        collective: Collective::AllReduce,
        nranks: 4,
        count: bytes / 4,
        root: rcoll::Rank::from(0usize),
        in_place: false,
    };
    let ranked = |local: CostModel, bytes: usize| {
        let levels = Levels {
            hosts: &hosts,
            local,
            receivers_read: true,
            level_algorithms: None,
        };
        rcoll::select::rank_algorithms(&layout(bytes), 4, &CostModel::default(), Some(&levels))
    };
    let shm = CostModel::shared_memory();
    for bytes in [16 << 10, 32 << 10] {
        // Recursive doubling's 2 rounds ran within 1.04-1.08 of the single root's there.
        let best = ranked(shm, bytes)[0].0;
        assert!(
            [Algorithm::SingleRoot, Algorithm::RecursiveDoubling].contains(&best),
            "{bytes} B: {best}"
        );
    }
    assert_eq!(ranked(shm, 64 << 20)[0].0, Algorithm::HalvingDoubling);
    // The cache rate applies up to CACHED_VECTOR bytes and only where the model has one.
    let time = |local: CostModel, bytes: usize, a: Algorithm| {
        ranked(local, bytes)
            .into_iter()
            .find(|(x, _)| *x == a)
            .unwrap()
            .1
            .predicted_us
    };
    let measured = CostModel {
        cache_speedup: 0.0,
        ..shm
    };
    let ring = Algorithm::Ring;
    let limit = CACHED_VECTOR as usize;
    assert!(time(shm, limit, ring) < time(measured, limit, ring));
    assert_eq!(time(shm, 2 * limit, ring), time(measured, 2 * limit, ring));
}

/// A crowded host's CPU takes the message ends, copies and reductions of the ranks it
/// holds one after another (a quarter of the host's work spread over its CPUs), loopback
/// TCP copies a vector in cache at 3 times its rate out of cache, and a small message
/// between two ranks of one CPU is read from that CPU's caches. Measured on 4 ranks and 2
/// CPUs over loopback TCP in five runs (`--algo all`, 40 rounds):
/// - 8 B: the single root 27.4-31.7 us, recursive doubling 31.8-38.8;
/// - 64 KiB: the tree, the fastest or within 1.02 of it, 61.6-74.3 us; the single root
///   64.6-79.8; the double binary tree (the model's choice when the CPU took the larger of
///   its message ends and its copies, not their sum) 73.0-90.6, halving-doubling
///   75.2-93.0;
/// - 128 KiB: the tree, the fastest, 89.5-110.6 us; the single root 98.6-118.7;
///   halving-doubling (that model's choice) 101.3-128.4, the double binary tree
///   113.6-147.7, the naive ring 93.0-154.5.
#[test]
fn a_crowded_cpu_takes_message_ends_copies_and_reductions_one_after_another() {
    use rcoll::schedule::cost::{CostModel, Levels};
    use rcoll::schedule::Layout;
    use rcoll_transport::hosts::HostMap;
    let hosts = HostMap::single(4).with_cpus(vec![2]);
    let ranked = |bytes: usize| {
        let layout = Layout {
            collective: Collective::AllReduce,
            nranks: 4,
            count: bytes / 4,
            root: rcoll::Rank::from(0usize),
            in_place: false,
        };
        let levels = Levels {
            hosts: &hosts,
            local: CostModel::tcp_loopback(),
            receivers_read: false,
            level_algorithms: None,
        };
        rcoll::select::rank_algorithms(&layout, 4, &CostModel::tcp(), Some(&levels))
    };
    let time = |bytes: usize, a: Algorithm| {
        let r = ranked(bytes);
        r.iter().find(|(x, _)| *x == a).unwrap().1.predicted_us
    };
    for bytes in [8, 64, 256] {
        assert_eq!(ranked(bytes)[0].0, Algorithm::SingleRoot, "{bytes} B");
    }
    for bytes in [64 << 10, 128 << 10] {
        let best = ranked(bytes)[0].0;
        assert_eq!(best, Algorithm::Tree, "{bytes} B");
        let slow = [Algorithm::HalvingDoubling, Algorithm::DoubleBinaryTree];
        for a in slow {
            assert!(
                time(bytes, Algorithm::SingleRoot) < time(bytes, a),
                "{bytes} B: the single root against {a}"
            );
        }
    }
    assert!(time(64 << 10, Algorithm::Tree) < time(64 << 10, Algorithm::DoubleBinaryTree));
}
