//! Rank counts no group can have are refused before anything is allocated: a clear
//! message and exit status 2 (a usage error) or 1 (a configuration error), never an
//! allocation abort (which a signal ends).

mod common;

use common::{bench, output};

fn refused(args: &[&str], words: &str) {
    let out = output(bench().args(args));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{args:?}: exit {:?} (an abort ends by a signal):\n{stderr}",
        out.status
    );
    assert!(stderr.contains(words), "{args:?}:\n{stderr}");
    assert!(!stderr.contains("memory allocation"), "{args:?}:\n{stderr}");
}

#[test]
fn more_ranks_than_rcoll_takes_are_refused() {
    // 2^32 + 1: once a 274 GB allocation.
    refused(
        &["all_reduce", "--ranks", "4294967297", "-e", "8"],
        "at most 1048576 ranks",
    );
    refused(
        &[
            "all_reduce",
            "--ranks",
            "4294967297",
            "--transport",
            "local",
            "-e",
            "8",
        ],
        "at most 1048576 ranks",
    );
}

#[test]
fn an_in_process_group_too_large_for_memory_is_refused() {
    // 10^10 channels: once a 3.8 TB allocation.
    refused(
        &[
            "all_reduce",
            "--ranks",
            "100000",
            "--transport",
            "local",
            "-e",
            "8",
        ],
        "an in-process group of 100000 ranks",
    );
}
