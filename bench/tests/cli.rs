//! Runs the built `rcoll-bench` binary: checked sweeps with a JSON file on threads, on
//! rank processes it starts itself over TCP, and as one rank under a launcher's
//! environment; a failing rank process; the planner's JSON; and verbs: `--transport verbs`
//! and `doctor` are refused with an explanation on a host without RDMA, and run on one with
//! devices (the Soft-RoCE VM: `soft-roce/run-in-vm.sh 'cargo test -p rcoll-bench'`).

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{bench, json_path, output, rows};

/// Asserts a successful, checked sweep: `sizes` rows, each with #wrong 0 in both modes,
/// and a JSON file with one record per row on `transport`.
fn assert_checked_sweep(out: &Output, json: &Path, sizes: &[usize], transport: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let rows = rows(&stdout);
    assert_eq!(rows.len(), sizes.len(), "{stdout}");
    let us = |cell: &str| -> f64 { cell.parse().expect("a time in microseconds") };
    for (row, size) in rows.iter().zip(sizes) {
        // nccl-tests' 13 columns, each mode's fastest and slowest iteration, the algorithm.
        assert_eq!(row.len(), 18, "{row:?}");
        assert_eq!(row[0], size.to_string(), "{row:?}");
        assert_eq!((row[8], row[12]), ("0", "0"), "{row:?}");
        // The mean of each mode lies between its fastest and slowest iterations (to the
        // table's rounding: four significant digits).
        for (time, min, max) in [(5, 13, 14), (9, 15, 16)] {
            let (t, lo, hi) = (us(row[time]), us(row[min]), us(row[max]));
            assert!(lo <= hi, "{row:?}");
            assert!(lo * 0.999 <= t && t <= hi * 1.001, "{row:?}");
        }
    }
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    assert!(stdout.contains("# Avg bus bandwidth"), "{stdout}");
    // The transport's name, then its details in parentheses where it has some (verbs: the
    // device, MTU and queue pairs).
    let named = format!("hosts 1, transport {transport}");
    assert!(
        [",", " ("]
            .iter()
            .any(|after| stdout.contains(&format!("{named}{after}"))),
        "{stdout}"
    );

    let text = std::fs::read_to_string(json).expect("JSON file written");
    let _ = std::fs::remove_file(json);
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
        assert_eq!(record["transport"], transport);
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
            // The mean lies between the extremes, up to the rounding of summing them.
            let f = |k: &str| m[k].as_f64().expect("a number");
            let (t, lo, hi) = (f("time_us"), f("min_us"), f("max_us"));
            assert!(lo <= hi, "{record}");
            assert!(
                lo * (1.0 - 1e-12) <= t && t <= hi * (1.0 + 1e-12),
                "{record}"
            );
        }
    }
}

/// The launcher variables that would make rcoll-bench a rank; the tests set their own.
const LAUNCHER_VARS: [&str; 11] = [
    "RCOLL_RANK",
    "RCOLL_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "RCOLL_BENCH_PARENT_PID",
];

fn bench_clean() -> Command {
    let mut cmd = bench();
    for var in LAUNCHER_VARS {
        cmd.env_remove(var);
    }
    cmd
}

#[test]
fn threads_sweep_is_correct_and_writes_one_record_per_size() {
    let json = json_path("threads");
    let out = output(
        bench_clean()
            .args([
                "all_reduce",
                "--ranks",
                "4",
                "--transport",
                "local",
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
            .arg(&json),
    );
    // 8, 32, ..., 512K: nine sizes.
    let sizes: Vec<usize> = (0..9).map(|i| 8 << (2 * i)).collect();
    assert_checked_sweep(&out, &json, &sizes, "local");
}

#[test]
fn three_rank_processes_over_tcp_are_correct() {
    let json = json_path("tcp");
    let out = output(
        bench_clean()
            .args([
                "all_reduce",
                "--ranks",
                "3",
                "--transport",
                "tcp",
                "-b",
                "8",
                "-e",
                "1M",
                "-f",
                "8",
                "-c",
                "1",
                "-J",
            ])
            .arg(&json),
    );
    // 8, 64, ..., 256K: six sizes.
    let sizes: Vec<usize> = (0..6).map(|i| 8 << (3 * i)).collect();
    assert_checked_sweep(&out, &json, &sizes, "tcp");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ranks 3,"), "{stdout}");
    // One line per rank, each its own process.
    let pids: std::collections::BTreeSet<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("#  Rank "))
        .filter_map(|l| l.split_whitespace().nth(4))
        .collect();
    assert_eq!(pids.len(), 3, "{stdout}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn under_a_launcher_each_process_is_one_rank() {
    let root = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let json = json_path("launcher");
    let out = output(
        bench_clean()
            .args(["all_reduce", "-b", "8", "-e", "64K", "-f", "16", "-J"])
            .arg(&json)
            .env("RCOLL_RANK", "0")
            .env("RCOLL_WORLD_SIZE", "1")
            .env("RCOLL_ROOT_ADDR", &root),
    );
    // 8, 128, 2K, 32K.
    assert_checked_sweep(&out, &json, &[8, 128, 2048, 32768], "tcp");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ranks 1,"), "{stdout}");
    assert!(
        stdout.contains(&format!("Pid {:>7}", out_pid(&stdout))),
        "{stdout}"
    );

    // --ranks that contradicts the launcher is refused before anything starts.
    let out = output(
        bench_clean()
            .args(["all_reduce", "--ranks", "2"])
            .env("RCOLL_RANK", "0")
            .env("RCOLL_WORLD_SIZE", "1")
            .env("RCOLL_ROOT_ADDR", &root),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("RCOLL_WORLD_SIZE=1"), "{stderr}");
}

/// The pid on rank 0's line of the header.
fn out_pid(stdout: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with("#  Rank  0 Pid"))
        .and_then(|l| l.split_whitespace().nth(4))
        .unwrap_or("?")
        .to_owned()
}

#[test]
fn a_wrong_result_on_one_rank_process_fails_the_run() {
    let out = output(
        bench_clean()
            .args([
                "all_reduce",
                "--ranks",
                "3",
                "-b",
                "8",
                "-e",
                "4K",
                "-f",
                "8",
            ])
            .env("RCOLL_BENCH_CORRUPT", "2"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Rank 0 reports the damage and exits 1; the parent passes that on.
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 4, "{stdout}");
    for row in &rows {
        assert_eq!((row[8], row[12]), ("1", "1"), "{row:?}");
    }
    assert!(
        stdout.contains("# Out of bounds values : 8 FAILED"),
        "{stdout}"
    );
    assert!(stderr.contains("8 wrong element(s)"), "{stderr}");
    assert!(stderr.contains("rank 0: exit status 1"), "{stderr}");
}

#[test]
fn a_bad_setting_is_refused_once_before_any_rank_starts() {
    let out = output(
        bench_clean()
            .args(["all_reduce", "--ranks", "2", "-e", "1K"])
            .env("RCOLL_TIMEOUT", "soon"),
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("RCOLL_TIMEOUT").count(), 1, "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The RDMA devices the kernel lists, sorted: none on a host without RDMA, rxe0 and rxe1
/// in the Soft-RoCE VM (soft-roce/run-in-vm.sh), where ci/test.sh runs the tests that read
/// them with `RCOLL_TEST_EXPECT_RDMA=1`: then none is a failure, not the other branch.
fn rdma_devices() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|dir| {
            dir.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    assert!(
        !names.is_empty() || std::env::var_os("RCOLL_TEST_EXPECT_RDMA").is_none(),
        "RCOLL_TEST_EXPECT_RDMA is set and /sys/class/infiniband lists no device"
    );
    names
}

/// The GIDs in use on port 1 of RDMA device `device`, from sysfs (an unused entry reads as
/// zeros).
fn gids_of(device: &str) -> Vec<std::net::Ipv6Addr> {
    let dir = format!("/sys/class/infiniband/{device}/ports/1/gids");
    let mut gids: Vec<std::net::Ipv6Addr> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .filter_map(|t| t.trim().parse().ok())
                .filter(|g: &std::net::Ipv6Addr| !g.is_unspecified())
                .collect()
        })
        .unwrap_or_default();
    gids.sort();
    gids.dedup();
    gids
}

/// The network interface under port 1 of RDMA device `device` (RoCE), from its GID table.
fn netdev_of(device: &str) -> Option<String> {
    let dir = format!("/sys/class/infiniband/{device}/ports/1/gid_attrs/ndevs");
    let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    entries.iter().find_map(|e| {
        let name = std::fs::read_to_string(e.path()).ok()?;
        Some(name.trim().to_owned()).filter(|n| !n.is_empty())
    })
}

#[test]
fn verbs_is_accepted_and_runs_where_rdma_exists() {
    let json = json_path("verbs");
    let mut cmd = bench_clean();
    cmd.args([
        "all_reduce",
        "--transport",
        "verbs",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "8",
        "-c",
        "1",
        "--timeout",
        "120",
    ])
    .arg("-J")
    .arg(&json);
    let netdevs: Vec<String> = rdma_devices().iter().filter_map(|d| netdev_of(d)).collect();
    if netdevs.len() >= 2 {
        // One rank on each device (the VM's rxe0 on veth0, rxe1 on veth1).
        cmd.args(["--device", &netdevs[..2].join(",")]);
    }
    let out = output(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("unknown transport"), "{stderr}");
    if rdma_devices().is_empty() {
        // Refused once, before any rank starts, pointing at the diagnosis.
        assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(
            stderr.contains("--transport verbs") && stderr.contains("RDMA"),
            "{stderr}"
        );
        assert!(stderr.contains("rcoll-bench doctor"), "{stderr}");
        let _ = std::fs::remove_file(&json);
    } else {
        assert_checked_sweep(&out, &json, &[8, 64, 512, 4096, 32768], "verbs");
        if netdevs.len() >= 2 {
            let both = format!("device {}", netdevs[..2].join(","));
            assert!(stdout.contains(&both), "{stdout}");
        }
    }
}

#[test]
fn doctor_explains_what_rdma_needs_or_lists_the_devices() {
    // Each device's GIDs before doctor runs, kept where they are still there after it: an
    // address that comes or goes meanwhile (a link-local one finishing its duplicate
    // address detection) is not doctor's to have listed.
    let gids_before: Vec<(String, Vec<std::net::Ipv6Addr>)> = rdma_devices()
        .into_iter()
        .map(|d| {
            let g = gids_of(&d);
            (d, g)
        })
        .collect();
    let out = output(bench_clean().args(["doctor", "--timeout", "120"]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout.lines().last().unwrap_or_default();
    let devices = rdma_devices();
    if devices.is_empty() {
        assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
        assert!(stdout.contains("RDMA support"), "{stdout}");
        assert!(
            stdout.contains("soft-roce/run-in-vm.sh") && stdout.contains("soft-roce/setup.sh"),
            "the fix is named: {stdout}"
        );
        assert!(stdout.contains("Max locked memory"), "{stdout}");
        assert!(summary.starts_with("summary: FAIL"), "{stdout}");
    } else {
        assert_success(&out);
        for device in &devices {
            assert!(stdout.contains(&format!("{device} port 1")), "{stdout}");
            // Its GID table as the kernel lists it (sysfs, not the verbs the probe asks):
            // every entry in use before and after doctor must be in doctor's table.
            let after = gids_of(device);
            let gids: Vec<std::net::Ipv6Addr> = gids_before
                .iter()
                .filter(|(d, _)| d == device)
                .flat_map(|(_, g)| g.iter().copied())
                .filter(|g| after.contains(g))
                .collect();
            assert!(!gids.is_empty(), "{device}: no GID in sysfs");
            for gid in gids {
                assert!(
                    stdout.contains(&gid.to_string()),
                    "{device}: GID {gid} missing from doctor's table:\n{stdout}"
                );
            }
        }
        assert!(stdout.contains("rcoll would use"), "{stdout}");
        if devices.len() >= 2 {
            assert!(stdout.contains("all_reduce over verbs"), "{stdout}");
        }
        assert!(summary.starts_with("summary: OK"), "{stdout}");
    }
}

/// A libibverbs that cannot be found: the process falls back to TCP under `auto`, and
/// `verbs` and `doctor` name what to install, on every rank.
#[test]
fn without_libibverbs_auto_runs_on_tcp_and_verbs_names_the_package() {
    let missing = "libibverbs-not-installed.so.1";
    let out =
        output(
            bench_clean()
                .env("RCOLL_IBVERBS_LIB", missing)
                .args(["doctor", "--timeout", "10"]),
        );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("{missing} not found: install rdma-core")),
        "{stdout}"
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(
        summary.contains("libibverbs not found") && summary.contains("falls back to tcp"),
        "{summary}"
    );

    let auto = output(bench_clean().env("RCOLL_IBVERBS_LIB", missing).args([
        "all_reduce",
        "--ranks",
        "2",
        "--transport",
        "auto",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "8",
        "-c",
        "1",
    ]));
    assert_success(&auto);
    let auto_out = String::from_utf8_lossy(&auto.stdout);
    // One host: shared memory, which needs no RDMA library either.
    assert!(auto_out.contains("transport shm"), "{auto_out}");
    // Large copies go through the rings unless single copy is asked for; and two ranks
    // with a CPU each spin while they wait (each bound to a core of its own, they still
    // share none).
    assert!(auto_out.contains("single copy off"), "{auto_out}");
    if std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2) {
        assert!(auto_out.contains("; waits spin"), "{auto_out}");
    }

    // Past the bench's own precheck: every rank process decides for itself.
    let verbs = output(
        bench_clean()
            .env("RCOLL_IBVERBS_LIB", missing)
            .env("RCOLL_TRANSPORT", "verbs")
            .args(["all_reduce", "--ranks", "2", "-b", "8", "-e", "8"]),
    );
    let stderr = String::from_utf8_lossy(&verbs.stderr);
    assert!(!verbs.status.success(), "{stderr}");
    assert!(
        stderr.contains("RCOLL_TRANSPORT=verbs, but rank 0, rank 1 cannot use RDMA")
            && stderr.contains("not found: install rdma-core"),
        "{stderr}"
    );
}

/// A file name of its own for each test, with the given extension.
fn temp_path(test: &str, ext: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "rcoll-bench-cli-{test}-{}.{ext}",
        std::process::id()
    ))
}

/// Width and height of a PNG, read from its signature and IHDR chunk (the first chunk,
/// big-endian width and height at bytes 16..24).
fn png_dimensions(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).expect("PNG written");
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        path.display()
    );
    assert_eq!(&bytes[12..16], b"IHDR", "first chunk of {}", path.display());
    let be =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (be(16), be(20))
}

fn assert_plausible_chart(path: &Path) {
    let (w, h) = png_dimensions(path);
    assert!(
        (400..=4000).contains(&w) && (300..=4000).contains(&h),
        "{w}x{h}"
    );
    assert!(w > h, "a landscape chart, not {w}x{h}");
}

/// `all_reduce --ranks 2 -b 8 -e 64K -f 4 -c 1` plus `extra` arguments.
fn small_tcp_sweep(extra: &[&std::ffi::OsStr]) -> Output {
    let mut cmd = bench_clean();
    cmd.args([
        "all_reduce",
        "--ranks",
        "2",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "4",
        "-c",
        "1",
    ])
    .args(extra);
    output(&mut cmd)
}

fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn plot_flag_writes_a_png_of_the_sweep() {
    let png = temp_path("plot-flag", "png");
    let _ = std::fs::remove_file(&png);
    let out = small_tcp_sweep(&["--plot".as_ref(), png.as_os_str()]);
    assert_success(&out);
    // Piped stderr: no progress line.
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_plausible_chart(&png);
    let _ = std::fs::remove_file(&png);
}

#[test]
fn plot_command_draws_one_line_per_json_file() {
    let (a, b) = (temp_path("plot-a", "json"), temp_path("plot-b", "json"));
    for json in [&a, &b] {
        assert_success(&small_tcp_sweep(&["-J".as_ref(), json.as_os_str()]));
    }
    let png = temp_path("plot-files", "png");
    let _ = std::fs::remove_file(&png);
    let out = output(
        bench_clean()
            .arg("plot")
            .args([&a, &b])
            .args(["--label", "first", "--label", "second", "-o"])
            .arg(&png),
    );
    assert_success(&out);
    assert_plausible_chart(&png);

    // In place, default labels.
    let out = output(
        bench_clean()
            .arg("plot")
            .args([&a, &b])
            .args(["--in-place", "-o"])
            .arg(&png),
    );
    assert_success(&out);
    assert_plausible_chart(&png);

    // A label for one of two files is refused.
    let out = output(
        bench_clean()
            .arg("plot")
            .args([&a, &b])
            .args(["--label", "x", "-o"])
            .arg(&png),
    );
    assert_eq!(out.status.code(), Some(2));
    for f in [a, b, png] {
        let _ = std::fs::remove_file(f);
    }
}

#[test]
fn plot_command_names_a_file_that_is_not_a_report() {
    let bad = temp_path("plot-bad", "json");
    std::fs::write(&bad, "[{\"size\": 8, \"oop\": ").expect("write");
    let png = temp_path("plot-bad", "png");
    let out = output(bench_clean().arg("plot").arg(&bad).arg("-o").arg(&png));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(&*bad.to_string_lossy()), "{stderr}");
    assert!(stderr.contains("not an rcoll-bench -J file"), "{stderr}");
    assert!(!png.exists(), "no chart from a bad file");

    let missing = temp_path("plot-missing", "json");
    let out = output(bench_clean().arg("plot").arg(&missing).arg("-o").arg(&png));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(&*missing.to_string_lossy()), "{stderr}");
    let _ = std::fs::remove_file(bad);
}

#[test]
fn a_chart_must_be_named_png() {
    let out = small_tcp_sweep(&["--plot".as_ref(), "chart.jpg".as_ref()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("*.png"), "{stderr}");
    assert!(out.stdout.is_empty(), "refused before the run");
}

#[test]
fn a_missing_font_names_the_package_before_the_run() {
    let png = temp_path("plot-nofont", "png");
    let mut cmd = bench_clean();
    cmd.env("RCOLL_BENCH_FONT", temp_path("no-such-font", "ttf"))
        .args(["all_reduce", "--transport", "local", "-e", "64", "--plot"])
        .arg(&png);
    let out = output(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("fonts-dejavu-core"), "{stderr}");
    assert!(out.stdout.is_empty(), "refused before the run");
    let _ = std::fs::remove_file(png);
}

#[test]
fn device_names_the_interface_or_lists_the_real_ones() {
    let sweep = [
        "all_reduce",
        "--ranks",
        "2",
        "--transport",
        "tcp",
        "-b",
        "8",
        "-e",
        "64",
        "-c",
        "1",
    ];
    let out = output(bench_clean().args(sweep).args(["--device", "lo"]));
    assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("device lo"), "{stdout}");

    // A list is dealt out round-robin, each rank's entry in its line of the header.
    let out = output(bench_clean().args(sweep).args(["--device", "lo,lo"]));
    assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("device lo,lo,"), "{stdout}");
    let rank1 = stdout
        .lines()
        .find(|l| l.starts_with("#  Rank  1 "))
        .unwrap_or_default();
    assert!(rank1.ends_with(" device lo"), "{stdout}");

    let out = output(bench_clean().args(sweep).args(["--device", "lo,"]));
    assert_eq!(out.status.code(), Some(2), "a usage error");

    let out = output(bench_clean().args(sweep).args(["--device", "nosuch0"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("nosuch0") && stderr.contains("lo ("),
        "{stderr}"
    );
}
