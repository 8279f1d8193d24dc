//! Runs the built `rcoll-bench` binary: a checked benchmark sweep with a JSON file, and
//! the planner's JSON.

use std::process::Command;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rcoll-bench"))
}

#[test]
fn all_reduce_sweep_is_correct_and_writes_one_record_per_size() {
    let json = std::env::temp_dir().join(format!("rcoll-bench-cli-{}.json", std::process::id()));
    let out = bench()
        .args([
            "all_reduce",
            "--ranks",
            "4",
            "-b",
            "8",
            "-e",
            "1M",
            "-f",
            "4",
            "-c",
            "1",
            "-J",
        ])
        .arg(&json)
        .output()
        .expect("run rcoll-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    // 8, 32, ..., 512K: nine sizes, each row with #wrong 0 out of place and in place.
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 9, "{stdout}");
    for row in &rows {
        assert_eq!(row.len(), 14, "{row:?}");
        assert_eq!((row[8], row[12]), ("0", "0"), "{row:?}");
    }
    assert_eq!(rows[0][0], "8");
    assert_eq!(rows[8][0], "524288");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    assert!(stdout.contains("# Avg bus bandwidth"), "{stdout}");

    let text = std::fs::read_to_string(&json).expect("JSON file written");
    let _ = std::fs::remove_file(&json);
    let records: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let records = records.as_array().expect("a JSON array");
    assert_eq!(records.len(), rows.len());
    for (record, row) in records.iter().zip(&rows) {
        assert_eq!(
            record["size"].as_u64().map(|s| s.to_string()).as_deref(),
            Some(row[0])
        );
        assert_eq!(record["type"], "f32");
        assert_eq!(record["redop"], "sum");
        assert_eq!(record["transport"], "local");
        assert!(record["algorithm"].is_string());
        for mode in ["oop", "ip"] {
            let m = &record[mode];
            assert_eq!(m["wrong"], 0, "{record}");
            for field in ["time_us", "algbw", "busbw", "min_us", "max_us", "p99_us"] {
                assert!(
                    m[field].as_f64().is_some_and(|v| v >= 0.0),
                    "{mode}.{field}: {record}"
                );
            }
            assert!(m["min_us"].as_f64() <= m["max_us"].as_f64());
        }
    }
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

#[test]
fn unbuilt_transports_are_refused_clearly() {
    let out = bench()
        .args(["all_reduce", "--transport", "verbs"])
        .output()
        .expect("run rcoll-bench");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not built"), "{stderr}");
}
