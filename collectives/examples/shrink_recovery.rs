//! How long the survivors of a killed rank take to run their next collective: by
//! [`Communicator::shrink`](rcoll::Communicator::shrink) (agree, reuse the connections),
//! or by tearing the group down and forming a new one from a rendezvous (what a job did
//! before shrink). `shrink_recovery shrink|rebuild BYTES`, ranks from the launcher
//! environment; the last rank kills itself (SIGKILL) in the middle of the loop, after
//! writing the time to `$RCOLL_DEATH_FILE`; `rebuild` meets again at
//! `$RCOLL_REBUILD_ADDR` (a free port on rank 0's host). Each survivor prints
//! `RECOVERY <mode> <rank> failed_ms shrunk_ms first_ms`: from the death to its call's
//! error, to the new communicator, to its first all_reduce done there.
//! `bench/figures/shrink.sh` runs it on 4 ranks over shared memory, TCP and verbs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos()
}

fn main() -> rcoll::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mode = args
        .get(1)
        .map(String::as_str)
        .unwrap_or("shrink")
        .to_string();
    let bytes: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1 << 20);
    let death_file = std::env::var("RCOLL_DEATH_FILE").expect("RCOLL_DEATH_FILE");
    let mut comm = rcoll::process::init()?;
    let (me, n) = (comm.rank(), comm.size());
    let mut v = vec![1f32; bytes / 4];
    let victim = n - 1;
    let err = 'run: {
        for i in 0..1_000_000 {
            if me == victim && i == 50 {
                std::fs::write(&death_file, now_ns().to_string()).expect("death file");
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &std::process::id().to_string()])
                    .status();
            }
            if let Err(e) = comm.all_reduce_in_place(&mut v, rcoll::ReduceOp::Sum) {
                break 'run e;
            }
            v.fill(1.0);
        }
        panic!("no rank died");
    };
    let failed = now_ns();
    let mut new = match mode.as_str() {
        "shrink" => comm.shrink(&[])?,
        "rebuild" => {
            drop(comm);
            let addr = std::env::var("RCOLL_REBUILD_ADDR").expect("RCOLL_REBUILD_ADDR");
            std::env::set_var("RCOLL_ROOT_ADDR", addr);
            std::env::set_var("RCOLL_WORLD_SIZE", (n - 1).to_string());
            rcoll::process::init()?
        }
        other => panic!("unknown mode {other}"),
    };
    let shrunk = now_ns();
    v.fill(1.0);
    new.all_reduce_in_place(&mut v, rcoll::ReduceOp::Sum)?;
    assert!(v.iter().all(|&x| x == (n - 1) as f32), "wrong sum");
    let first = now_ns();
    let died: u128 = std::fs::read_to_string(&death_file)
        .expect("death file")
        .trim()
        .parse()
        .expect("a time");
    let ms = |t: u128| t.saturating_sub(died) as f64 / 1e6;
    println!(
        "RECOVERY {mode} {me} {:.2} {:.2} {:.2} ({err})",
        ms(failed),
        ms(shrunk),
        ms(first)
    );
    Ok(())
}
