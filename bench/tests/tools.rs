//! Runs the built `rcoll-bench`'s tools: `plan` (priced, verified schedules and the ring
//! order), `topo` (the host, the ranks' places and how far apart its CPUs are), `simulate`
//! (a table and a chart), `--algo all` (every algorithm and auto's regret) and `calibrate`
//! (a tuning file auto follows).

mod common;

use common::{bench, json_path, output, rows, succeeded};

/// `simulate`: a row per algorithm and rank count up to 4,096 on hosts of 8, the double
/// binary tree's rounds growing by a constant per doubling (log p), and the PNG written.
#[test]
fn simulate_prices_real_schedules_per_rank_count_and_draws_them() {
    let png = json_path("simulate").with_extension("png");
    let out = output(bench().args([
        "simulate",
        "all_reduce",
        "--max-ranks",
        "4096",
        "--algo",
        "ring,double_binary_tree",
        "--plot",
        png.to_str().expect("utf-8 path"),
    ]));
    let stdout = succeeded(&out);
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 2 * 12, "{stdout}"); // 2, 4, ..., 4096
    let rounds: Vec<usize> = rows
        .iter()
        .filter(|r| r[2] == "double_binary_tree")
        .map(|r| r[4].parse().expect("rounds"))
        .collect();
    let steps: Vec<usize> = rounds.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        steps[2..].iter().all(|&d| d == steps[2]),
        "rounds {rounds:?}"
    );
    let bytes = std::fs::read(&png).expect("the chart");
    let _ = std::fs::remove_file(&png);
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
}

/// `--algo all`: one row per size with auto's choice, a time for auto and every algorithm
/// that serves the collective (all results right: no `x`), the best, auto's regret and the
/// regret of its choice (its forced run over the best: 1 when it is the best).
#[test]
fn algo_all_times_every_algorithm_and_auto_and_reports_the_regret() {
    let out = output(bench().args([
        "all_gather",
        "--ranks",
        "3",
        "--transport",
        "local",
        "--algo",
        "all",
        "-b",
        "96",
        "-e",
        "96K",
        "-f",
        "32",
        "-n",
        "3",
        "-w",
        "1",
    ]));
    let stdout = succeeded(&out);
    let header = stdout
        .lines()
        .find(|l| l.contains("auto's choice"))
        .expect("the comparison header");
    let serving = [
        "mesh", "single", "tree", "binom", "nring", "ring", "hd", "hier",
    ];
    for name in serving {
        assert!(
            header.split_whitespace().any(|w| w == name),
            "{name}: {header}"
        );
    }
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 3, "{stdout}"); // 96 B, 3 KiB, 96 KiB
    for r in &rows {
        // size, choice, auto + 8 algorithms, best, regret, choice's regret, `!` past 1.10
        let r = r.strip_suffix(&["!"]).unwrap_or(r);
        assert_eq!(r.len(), 2 + 1 + serving.len() + 3, "{r:?}");
        assert!(!r.contains(&"x"), "a wrong result: {r:?}");
        let regret: f64 = r[2 + 1 + serving.len() + 1].parse().expect("regret");
        assert!(regret > 0.0, "{r:?}");
        let best = r[2 + 1 + serving.len()];
        let chosen: f64 = r[2 + 1 + serving.len() + 2]
            .parse()
            .expect("choice's regret");
        let times: Vec<f64> = r[3..3 + serving.len()]
            .iter()
            .map(|t| t.parse().expect("a time"))
            .collect();
        let at = |name: &str| times[serving.iter().position(|s| *s == name).expect("served")];
        let choice = match r[1] {
            "single_root" => "single",
            "binomial_tree" => "binom",
            "naive_ring" => "nring",
            "halving_doubling" => "hd",
            "hierarchical" => "hier",
            other => other,
        };
        // Times are printed to 0.1 us and ratios to 0.01.
        let (c, b) = (at(choice), at(best));
        let low = (c - 0.05) / (b + 0.05) - 0.005;
        let high = (c + 0.05) / (b - 0.05).max(1e-9) + 0.005;
        assert!(low <= chosen && chosen <= high, "{r:?}");
        assert!(chosen >= 1.0 - 1e-9, "{r:?}");
    }
    assert!(stdout.contains("# auto's regret: worst "), "{stdout}");
    // The summary counts the rows marked `!`, or says there are none.
    let marked = rows.iter().filter(|r| r.last() == Some(&"!")).count();
    let summary = match marked {
        0 => "at every size)".to_owned(),
        m => format!("at {m} of 3 sizes: the ones marked !)"),
    };
    assert!(stdout.contains(&summary), "{summary}: {stdout}");
    assert!(
        stdout.contains("# auto's choice (run forced in the same rounds) over the best: worst "),
        "{stdout}"
    );
    assert!(
        !stdout.contains("# auto's trials"),
        "no trials asked for: {stdout}"
    );
}

/// `--algo all` with selection by trial (`RCOLL_AUTOTUNE`): auto warms up until its trials
/// are over, whatever `-w` says, and the table says after how many calls; the choice it
/// reports is what it settled on, and every result is right.
#[test]
fn algo_all_with_autotune_times_auto_after_its_trials() {
    let out = output(
        bench()
            .args([
                "all_reduce",
                "--ranks",
                "3",
                "--transport",
                "shm",
                "--algo",
                "all",
                "-b",
                "2M",
                "-e",
                "4M",
                "-f",
                "2",
                "-n",
                "3",
                "-w",
                "1",
            ])
            .env("RCOLL_AUTOTUNE", "1"),
    );
    let stdout = succeeded(&out);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("# auto's trials (RCOLL_AUTOTUNE): over after "))
        .unwrap_or_else(|| panic!("no trials line: {stdout}"));
    let calls = line.split_whitespace().nth(6).expect("the calls");
    let (lo, hi) = calls.split_once('-').expect("lo-hi");
    let (lo, hi): (usize, usize) = (lo.parse().unwrap(), hi.parse().unwrap());
    // Two passes of a warm-up and one timed call for each of at least two candidates;
    // at most three passes of ten.
    assert!(8 <= lo && lo <= hi && hi <= 60, "{line}");
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 2, "{stdout}");
    for r in &rows {
        assert!(!r.contains(&"x"), "a wrong result: {r:?}");
    }
}

/// `calibrate` of all_reduce on 2 local ranks from 8 bytes, one warmup call, into `file`,
/// with `extra` arguments.
fn calibrate_local(file: &std::path::Path, extra: &[&str]) -> std::process::Output {
    output(
        bench()
            .args(["calibrate", "--transport", "local", "--ranks", "2"])
            .args(["--collectives", "all_reduce", "-b", "8", "-w", "1"])
            .args(extra)
            .args(["-o", file.to_str().expect("utf-8 path")]),
    )
}

/// By default `calibrate` measures every power of two: each size bucket auto chooses for
/// (it rounds sizes up to one) gets a rule of its own, none borrowed from a neighbour;
/// with several passes, still one rule per size.
#[test]
fn calibrate_measures_every_size_bucket_by_default() {
    let file = json_path("calibrate-buckets");
    let out = calibrate_local(&file, &["-e", "128", "-n", "2", "--passes", "2"]);
    let stdout = succeeded(&out);
    assert!(stdout.contains("pass 2 of 2"), "{stdout}");
    let text = std::fs::read_to_string(&file).expect("the tuning file");
    let _ = std::fs::remove_file(&file);
    let tuning: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let mut sizes: Vec<u64> = tuning["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["bytes"].as_u64())
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [8, 16, 32, 64, 128], "{text}");
}

/// `calibrate` writes a tuning file whose rules auto then follows, size by size; a file
/// that cannot be read is refused before anything runs, naming the variable.
#[test]
fn calibrate_writes_a_tuning_file_that_auto_follows() {
    let file = json_path("calibrate");
    succeeded(&calibrate_local(
        &file,
        &["-e", "32K", "-f", "8", "-n", "3"],
    ));
    let text = std::fs::read_to_string(&file).expect("the tuning file");
    let tuning: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert!(
        tuning["models"]["local"]["alpha_us"].as_f64().is_some(),
        "{text}"
    );
    let rules = tuning["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 5, "{text}"); // 8 B .. 32 KiB by 8
    let rule_for = |bytes: u64| -> String {
        rules
            .iter()
            .find(|r| r["bytes"].as_u64() == Some(bytes))
            .and_then(|r| r["algorithm"].as_str())
            .unwrap_or_else(|| panic!("no rule for {bytes} B: {text}"))
            .to_owned()
    };

    let out = output(
        bench()
            .args(["all_reduce", "--ranks", "2", "--transport", "local"])
            .args(["-b", "8", "-e", "32K", "-f", "8", "-n", "2", "-w", "1"])
            .env("RCOLL_TUNING_FILE", &file),
    );
    let stdout = succeeded(&out);
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 5, "{stdout}");
    for r in &rows {
        let bytes: u64 = r[0].parse().expect("size");
        assert_eq!(
            r.last().copied(),
            Some(rule_for(bytes).as_str()),
            "{r:?}\n{text}"
        );
    }

    let missing = file.with_extension("missing.json");
    let out = output(
        bench()
            .args([
                "all_reduce",
                "--ranks",
                "2",
                "--transport",
                "local",
                "-e",
                "8",
            ])
            .env("RCOLL_TUNING_FILE", &missing),
    );
    let _ = std::fs::remove_file(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("RCOLL_TUNING_FILE"), "{stderr}");
    assert!(stderr.contains("missing.json"), "{stderr}");
}

#[test]
fn plan_json_has_one_object_per_algorithm() {
    let out = bench()
        .args([
            "plan",
            "all_reduce",
            "--ranks",
            "5",
            "--bytes",
            "5000000",
            "--json",
        ])
        .output()
        .expect("run rcoll-bench plan");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let rows = rows.as_array().expect("a JSON array");
    assert_eq!(rows.len(), rcoll::Algorithm::ALL.len());
    for row in rows {
        assert!(row["algorithm"].is_string(), "{row}");
        for field in ["steps", "total_bytes", "max_step_bytes_per_rank"] {
            assert!(row[field].is_u64(), "{field}: {row}");
        }
        assert!(row["predicted_us"].is_f64(), "{row}");
        assert_eq!(row["verified"], true, "{row}");
    }
    let ring = rows
        .iter()
        .find(|r| r["algorithm"] == "ring")
        .expect("ring row");
    assert_eq!(ring["steps"], 8);
    assert_eq!(ring["total_bytes"], 40_000_000);
    assert_eq!(ring["max_step_bytes_per_rank"], 1_000_000);
}

/// `rcoll-bench topo` on an hwloc XML file of four NUMA nodes with two NICs on node 2: the
/// picture, each local rank's node, CPUs and NIC, and the same as JSON in
/// RCOLL_TOPO_DUMP_FILE; on this machine it runs whatever it has.
#[test]
fn topo_shows_the_machine_and_where_each_local_rank_runs() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../transport/tests/topologies/four-numa-two-nics.xml"
    );
    let dump = json_path("topo");
    let out = output(
        bench()
            .args(["topo", "--input", file, "--ranks-per-host", "8"])
            .env("RCOLL_TOPO_DUMP_FILE", &dump)
            .env_remove("RCOLL_BIND"),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // The default: two ranks per 2-core node, so a core each.
    for want in [
        "4 NUMA node(s), 8 core(s), 16 PU(s)",
        "NUMA node 2: cpus 8-11 (2 cores); devices: ens3f0, mlx5_0 (rdma over ens3f0)",
        "placement of 8 local rank(s), RCOLL_BIND=auto",
        "local rank 4: NUMA node 2, cpus 8-9, device mlx5_0",
        "local rank 5: NUMA node 2, cpus 10-11, device mlx5_1",
        "local rank 0: NUMA node 0, cpus 0-1, device by address (no RDMA device on NUMA node 0",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    // Three ranks per node do not fit its two cores: they take the cores in turn.
    let crowded = output(
        bench()
            .args(["topo", "--input", file, "--ranks-per-host", "12"])
            .env_remove("RCOLL_BIND"),
    );
    let crowded = String::from_utf8_lossy(&crowded.stdout);
    for want in [
        "local rank 6: NUMA node 2, cpus 8-9",
        "local rank 7: NUMA node 2, cpus 10-11",
        "local rank 8: NUMA node 2, cpus 8-9",
    ] {
        assert!(crowded.contains(want), "no {want:?} in:\n{crowded}");
    }
    let numa = output(bench().args([
        "topo",
        "--input",
        file,
        "--ranks-per-host",
        "8",
        "--bind",
        "numa",
    ]));
    let numa = String::from_utf8_lossy(&numa.stdout);
    assert!(
        numa.contains("local rank 4: NUMA node 2, cpus 8-11, device mlx5_0"),
        "{numa}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dump).expect("dump")).expect("json");
    std::fs::remove_file(&dump).ok();
    assert_eq!(json["placements"][5]["device"], "mlx5_1");
    assert_eq!(json["topology"]["numa"].as_array().map(Vec::len), Some(4));
    let here = output(bench().args(["topo"]).env_remove("RCOLL_TOPO_FILE"));
    assert!(
        here.status.success(),
        "{}",
        String::from_utf8_lossy(&here.stderr)
    );
    let here = String::from_utf8_lossy(&here.stdout);
    assert!(here.contains("local rank 0: NUMA node"), "{here}");
    // The live machine's CPUs are measured (two of them at least here and in CI); a file's
    // are not.
    if std::thread::available_parallelism().map_or(1, usize::from) >= 2 {
        let line = here
            .lines()
            .find(|l| l.starts_with("cache line round trip between CPUs"))
            .unwrap_or_else(|| panic!("no round trip in {here}"));
        assert!(line.ends_with(" ns"), "{line}");
    }
    assert!(!numa.contains("round trip"), "{numa}");
    // Nor is a file's, named by RCOLL_TOPO_FILE.
    let from_file = output(bench().args(["topo"]).env("RCOLL_TOPO_FILE", file));
    let from_file = String::from_utf8_lossy(&from_file.stdout);
    assert!(from_file.contains("XML file"), "{from_file}");
    assert!(!from_file.contains("round trip"), "{from_file}");
}

/// `rcoll-bench plan --hosts 2 --cyclic`: ranks 0 and 2 on one host, 1 and 3 on the other;
/// the ring runs host by host (0 2 1 3), crossing hosts twice a round, half the crossing
/// messages of rank order.
#[test]
fn plan_prints_the_ring_order_and_its_crossings() {
    let plan = |order: &str| {
        let out = output(bench().args([
            "plan",
            "all_reduce",
            "--ranks",
            "4",
            "--hosts",
            "2",
            "--cyclic",
            "--bytes",
            "64M",
            "--ring-order",
            order,
        ]));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let by_network = plan("topology");
    assert!(
        by_network
            .contains("# ring order (by network): 0 2 1 3; a trip around it crosses hosts 2 times"),
        "{by_network}"
    );
    let by_rank = plan("rank");
    assert!(
        by_rank
            .contains("# ring order (rank order): 0 1 2 3; a trip around it crosses hosts 4 times"),
        "{by_rank}"
    );
    let crossing = |text: &str| -> u64 {
        // The cheapest row starts with `*`.
        let ring: Vec<&str> = rows(text)
            .into_iter()
            .map(|r| r.into_iter().filter(|c| *c != "*").collect::<Vec<&str>>())
            .find(|r| r.first() == Some(&"ring"))
            .expect("a ring row");
        ring[6].parse().expect("cross_host_messages")
    };
    assert_eq!(crossing(&by_rank), 2 * crossing(&by_network));
}
