//! Runs the built `rcoll-bench`'s tools: `simulate` (a table and a chart), `--algo all`
//! (every algorithm and auto's regret) and `calibrate` (a tuning file auto follows).

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
