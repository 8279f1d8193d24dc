//! Helpers shared by the real-data tests: run a closure on every rank of an in-process
//! group, and deterministic data whose reductions are exact in every element type.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use half::{bf16, f16};
use rcoll::{Algorithm, Collective, Communicator, DataType, Element, ReduceOp};

/// Runs `body` on each rank of a fresh `n`-rank group (one thread per rank) and returns
/// the per-rank results in rank order.
pub fn on_ranks<R: Send>(
    n: usize,
    algorithm: Option<Algorithm>,
    timeout: Duration,
    body: impl Fn(&mut Communicator) -> R + Sync,
) -> Vec<R> {
    on_group(
        rcoll::local::Builder::new(n)
            .algorithm(algorithm)
            .timeout(timeout),
        body,
    )
}

/// Runs `body` on each rank of the group `builder` makes.
pub fn on_group<R: Send>(
    builder: rcoll::local::Builder,
    body: impl Fn(&mut Communicator) -> R + Sync,
) -> Vec<R> {
    let comms = builder.build().expect("group");
    std::thread::scope(|s| {
        let body = &body;
        let handles: Vec<_> = comms
            .into_iter()
            .map(|mut c| s.spawn(move || body(&mut c)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

/// Input element `i` of rank `rank`. Floats: small integers, so that every sum, min and
/// max of up to 8 of them, and every product (of 1s and 2s), is exactly representable in
/// every float type — including f16 and bf16 — whatever the order of reduction, and
/// compared exactly. Integers: spread over the type's whole range (odd for products), so
/// that sums, products and averages wrap as rcoll defines (see [`reference`]).
pub fn value<T: Element>(op: ReduceOp, rank: usize, i: usize) -> T {
    if !T::DTYPE.is_float() {
        let h = i128::from(mix(rank, i % PERIOD));
        return int_to::<T>(if op == ReduceOp::Prod { h | 1 } else { h });
    }
    let k = (rank * 7 + i * 3) % 11;
    let v = match op {
        ReduceOp::Prod => {
            if (rank + i) % 3 == 0 {
                2.0
            } else {
                1.0
            }
        }
        _ => k as f64 - 5.0,
    };
    float_to::<T>(v)
}

/// 64 bits that look random, of a rank and an index (SplitMix64's finaliser).
fn mix(rank: usize, i: usize) -> u64 {
    let mut z = (rank as u64 + 1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The reduction of element `i` over `n` ranks: [`reference`] of their values.
pub fn reduced<T: Element>(op: ReduceOp, n: usize, i: usize) -> T {
    let inputs: Vec<T> = (0..n).map(|r| value::<T>(op, r, i)).collect();
    reference(op, &inputs)
}

/// `op` over `inputs` (one per rank, in rank order) as rcoll defines it (`ReduceOp`'s
/// documentation), computed without rcoll's kernels or conversions: integers read from
/// their bytes into i128, reduced exactly and wrapped into the type (two's complement,
/// modulo 2^bits) after each sum and product; Avg is the wrapped sum divided by the number
/// of ranks (saturated at the type's largest value), truncating toward zero. Floats in f64
/// and rounded once into the type (the data make every result but Avg's exact, and Avg's
/// is the correctly rounded quotient of an exact sum); bitwise operations are not defined
/// on them.
pub fn reference<T: Element>(op: ReduceOp, inputs: &[T]) -> T {
    let n = inputs.len();
    assert!(n > 0, "a reduction of no ranks");
    if !T::DTYPE.is_float() {
        let xs: Vec<i128> = inputs.iter().map(|&x| int_of(x)).collect();
        let wrap = |v: i128| int_of(int_to::<T>(v));
        let sum = || xs.iter().fold(0, |a, &x| wrap(a + x));
        let r = match op {
            ReduceOp::Sum => sum(),
            // |a|, |x| < 2^64: the product fits 2^128, and wrapping it modulo 2^128 keeps it
            // right modulo 2^bits.
            ReduceOp::Prod => xs.iter().fold(1i128, |a, &x| wrap(a.wrapping_mul(x))),
            ReduceOp::Min => *xs.iter().min().expect("n > 0"),
            ReduceOp::Max => *xs.iter().max().expect("n > 0"),
            ReduceOp::Avg => {
                let bits = 8 * T::DTYPE.size() as u32;
                let signed = T::DTYPE.name().starts_with('i');
                let largest = (1i128 << (bits - u32::from(signed))) - 1;
                sum() / (n as i128).min(largest)
            }
            ReduceOp::BitAnd => xs.iter().fold(-1, |a, &x| a & x),
            ReduceOp::BitOr => xs.iter().fold(0, |a, &x| a | x),
            ReduceOp::BitXor => xs.iter().fold(0, |a, &x| a ^ x),
            other => panic!("no reference for {other}"),
        };
        return int_to::<T>(r);
    }
    let xs: Vec<f64> = inputs.iter().map(|&x| float_of(x)).collect();
    let r = match op {
        ReduceOp::Sum => xs.iter().sum(),
        ReduceOp::Prod => xs.iter().product(),
        ReduceOp::Min => xs.iter().copied().fold(f64::INFINITY, f64::min),
        ReduceOp::Max => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Avg => xs.iter().sum::<f64>() / n as f64,
        other => panic!("{other} is not defined on {}", T::DTYPE),
    };
    float_to::<T>(r)
}

/// An integer element's value, read from its bytes.
pub fn int_of<T: Element>(x: T) -> i128 {
    use bytemuck::cast;
    match T::DTYPE {
        DataType::I8 => i128::from(cast::<T, i8>(x)),
        DataType::U8 => i128::from(cast::<T, u8>(x)),
        DataType::I32 => i128::from(cast::<T, i32>(x)),
        DataType::U32 => i128::from(cast::<T, u32>(x)),
        DataType::I64 => i128::from(cast::<T, i64>(x)),
        DataType::U64 => i128::from(cast::<T, u64>(x)),
        other => panic!("{other} is not an integer type"),
    }
}

/// `v` modulo 2^bits as an integer element (`as` keeps the low bits).
pub fn int_to<T: Element>(v: i128) -> T {
    use bytemuck::cast;
    match T::DTYPE {
        DataType::I8 => cast::<i8, T>(v as i8),
        DataType::U8 => cast::<u8, T>(v as u8),
        DataType::I32 => cast::<i32, T>(v as i32),
        DataType::U32 => cast::<u32, T>(v as u32),
        DataType::I64 => cast::<i64, T>(v as i64),
        DataType::U64 => cast::<u64, T>(v as u64),
        other => panic!("{other} is not an integer type"),
    }
}

/// A float element's value, read from its bytes (`half` widens f16 and bf16 exactly).
pub fn float_of<T: Element>(x: T) -> f64 {
    use bytemuck::cast;
    match T::DTYPE {
        DataType::F16 => f16::from_bits(cast::<T, u16>(x)).to_f64(),
        DataType::Bf16 => bf16::from_bits(cast::<T, u16>(x)).to_f64(),
        DataType::F32 => f64::from(cast::<T, f32>(x)),
        DataType::F64 => cast::<T, f64>(x),
        other => panic!("{other} is not a float type"),
    }
}

/// `v` rounded to the nearest float element.
pub fn float_to<T: Element>(v: f64) -> T {
    use bytemuck::cast;
    match T::DTYPE {
        DataType::F16 => cast::<u16, T>(f16::from_f64(v).to_bits()),
        DataType::Bf16 => cast::<u16, T>(bf16::from_f64(v).to_bits()),
        DataType::F32 => cast::<f32, T>(v as f32),
        DataType::F64 => cast::<f64, T>(v),
        other => panic!("{other} is not a float type"),
    }
}

/// The data above repeats every `PERIOD` elements (`i` enters through `i % 11` and `i % 3`,
/// or `i % PERIOD`).
/// 33 shares no factor with a power of two, so a block misplaced by a power-of-two number
/// of elements still shows.
pub const PERIOD: usize = 33;

/// One period of `value` for every rank, and of `reduced` over them: what a check needs of
/// the data, at a table lookup per element. (Evaluating `value` per element cost a 2-rank
/// 64 MiB all_reduce more time than the call in the emulated VM.)
pub struct Data<T> {
    ranks: Vec<[T; PERIOD]>,
    reduced: [T; PERIOD],
    sentinel: T,
}

impl<T: Element> Data<T> {
    /// The tables of `n` ranks' data for `op`.
    pub fn new(op: ReduceOp, n: usize) -> Self {
        let ranks: Vec<[T; PERIOD]> = (0..n)
            .map(|r| std::array::from_fn(|i| value::<T>(op, r, i)))
            .collect();
        let reduced: [T; PERIOD] = std::array::from_fn(|i| reduced::<T>(op, n, i));
        // The first of 99, 98, ... (floats) or 99, 100, ... (integers) that no rank holds
        // and no reduction gives.
        let sentinel = (0..)
            .map(|j: i32| {
                if T::DTYPE.is_float() {
                    float_to::<T>(f64::from(99 - j))
                } else {
                    int_to::<T>(i128::from(99 + j))
                }
            })
            .find(|s| !reduced.contains(s) && !ranks.iter().any(|r| r.contains(s)))
            .expect("a value the data lacks");
        Data {
            ranks,
            reduced,
            sentinel,
        }
    }

    /// A value no collective produces from these data, to fill outputs with.
    pub fn sentinel(&self) -> T {
        self.sentinel
    }

    /// `value(op, rank, i)`.
    pub fn at(&self, rank: usize, i: usize) -> T {
        self.ranks[rank][i % PERIOD]
    }

    /// `value(op, rank, i)` for `i` in `0..len`.
    pub fn of(&self, rank: usize, len: usize) -> Vec<T> {
        self.ranks[rank].iter().copied().cycle().take(len).collect()
    }

    /// `reduced(op, n, i)` for `i` in `from..from + len`.
    pub fn reduced(&self, from: usize, len: usize) -> Vec<T> {
        let table = &self.reduced;
        table
            .iter()
            .copied()
            .cycle()
            .skip(from % PERIOD)
            .take(len)
            .collect()
    }
}

/// One call on this rank, checked against the definition. Returns a description of the
/// first wrong element or the error.
pub fn run_one<T: Element>(
    comm: &mut Communicator,
    algorithm: Algorithm,
    collective: Collective,
    op: ReduceOp,
    count: usize,
    root: usize,
    in_place: bool,
) -> Result<(), String> {
    let (n, r) = (comm.size(), comm.rank());
    let data = Data::<T>::new(op, n);
    let v = |rank: usize, i: usize| data.at(rank, i);
    let mine = |len: usize| data.of(r, len);
    let s = data.sentinel();
    let mut c = comm.with_algorithm(algorithm);
    // (buffer after the call, expected contents)
    let (got, want): (Vec<T>, Vec<T>) = match collective {
        Collective::AllReduce => {
            let want = data.reduced(0, count);
            if in_place {
                let mut b = mine(count);
                c.all_reduce_in_place(&mut b, op).map(|_| (b, want))
            } else {
                let mut out = vec![s; count];
                c.all_reduce(&mine(count), &mut out, op)
                    .map(|_| (out, want))
            }
        }
        Collective::Reduce => {
            let want: Vec<T> = if r == root {
                data.reduced(0, count)
            } else {
                mine(count)
            };
            if in_place {
                let mut b = mine(count);
                c.reduce_in_place(&mut b, op, root).map(|_| (b, want))
            } else {
                let mut out = vec![s; if r == root { count } else { 0 }];
                let want = if r == root { want } else { vec![] };
                c.reduce(&mine(count), &mut out, op, root)
                    .map(|_| (out, want))
            }
        }
        Collective::Broadcast => {
            let want: Vec<T> = (0..count).map(|i| v(root, i)).collect();
            let mut b = if r == root && in_place {
                mine(count)
            } else {
                vec![s; count]
            };
            if in_place {
                c.broadcast_in_place(&mut b, root).map(|_| (b, want))
            } else {
                let send = if r == root { mine(count) } else { vec![] };
                c.broadcast(&send, &mut b, root).map(|_| (b, want))
            }
        }
        Collective::AllGather => {
            let want: Vec<T> = (0..n * count)
                .map(|j| v(j / count.max(1), j % count.max(1)))
                .collect();
            if in_place {
                let mut b = vec![s; n * count];
                b[r * count..(r + 1) * count].copy_from_slice(&mine(count));
                c.all_gather_in_place(&mut b).map(|_| (b, want))
            } else {
                let mut out = vec![s; n * count];
                c.all_gather(&mine(count), &mut out).map(|_| (out, want))
            }
        }
        Collective::ReduceScatter => {
            let block = data.reduced(r * count, count);
            if in_place {
                let mut b = mine(n * count);
                let mut want = b.clone();
                want[r * count..(r + 1) * count].copy_from_slice(&block);
                c.reduce_scatter_in_place(&mut b, op).map(|_| (b, want))
            } else {
                let mut out = vec![s; count];
                c.reduce_scatter(&mine(n * count), &mut out, op)
                    .map(|_| (out, block))
            }
        }
        Collective::Gather => {
            let all: Vec<T> = (0..n * count)
                .map(|j| v(j / count.max(1), j % count.max(1)))
                .collect();
            if in_place {
                let mut b = if r == root {
                    vec![s; n * count]
                } else {
                    mine(count)
                };
                if r == root {
                    b[r * count..(r + 1) * count].copy_from_slice(&mine(count));
                }
                let want = if r == root { all } else { mine(count) };
                c.gather_in_place(&mut b, root).map(|_| (b, want))
            } else {
                let mut out = vec![s; if r == root { n * count } else { 0 }];
                let want = if r == root { all } else { vec![] };
                c.gather(&mine(count), &mut out, root).map(|_| (out, want))
            }
        }
        Collective::Scatter => {
            let want: Vec<T> = (0..count).map(|i| v(root, r * count + i)).collect();
            if in_place {
                let mut b = if r == root {
                    mine(n * count)
                } else {
                    vec![s; count]
                };
                let want = if r == root {
                    let mut w = mine(n * count);
                    w[r * count..(r + 1) * count].copy_from_slice(&want);
                    w
                } else {
                    want
                };
                c.scatter_in_place(&mut b, root).map(|_| (b, want))
            } else {
                let send = if r == root { mine(n * count) } else { vec![] };
                let mut out = vec![s; count];
                c.scatter(&send, &mut out, root).map(|_| (out, want))
            }
        }
        Collective::AllToAll => {
            let want: Vec<T> = (0..n * count)
                .map(|j| v(j / count.max(1), r * count + j % count.max(1)))
                .collect();
            if in_place {
                let mut b = mine(n * count);
                c.all_to_all_in_place(&mut b).map(|_| (b, want))
            } else {
                let mut out = vec![s; n * count];
                c.all_to_all(&mine(n * count), &mut out)
                    .map(|_| (out, want))
            }
        }
        Collective::Barrier => c.barrier().map(|_| (vec![], vec![])),
        _ => return Ok(()),
    }
    .map_err(|e| e.to_string())?;
    if got.len() != want.len() {
        return Err(format!("buffer length {} != {}", got.len(), want.len()));
    }
    match got.iter().zip(&want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(format!("element {i}: got {:?}, want {:?}", got[i], want[i])),
    }
}

/// The line every rank process prints as the last thing its body does (see
/// [`rank_complete`]). [`finish`] counts a rank as successful only if it exited with status
/// 0 *and* printed it: a rank whose test filter matched nothing (`ok. 0 passed`), or that
/// left its body early by another way than a failure, exits 0 too.
pub const RANK_COMPLETE: &str = "RANK-COMPLETE";

/// Marks the end of a rank process's body: prints [`RANK_COMPLETE`] on a line of its own.
/// Call it once, after everything the rank checks.
pub fn rank_complete() {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // The line must reach the pipe before the process can exit (exit does not flush).
    let _ = writeln!(out, "{RANK_COMPLETE}");
    let _ = out.flush();
}

/// Whether a rank's output holds the completion marker on a line of its own (after any
/// prefix a launcher puts before each line, as `ci/multihost.sh`'s `[rank N] `).
pub fn completed(output: &str) -> bool {
    output.lines().any(|l| {
        l.trim_end()
            .strip_suffix(RANK_COMPLETE)
            .is_some_and(|p| p.is_empty() || p.ends_with(' '))
    })
}

/// Every rank succeeded; otherwise a panic with every rank's output (a stall is often a
/// third rank's).
pub fn all_succeed(what: &str, results: &[(bool, String)]) {
    if results.iter().all(|(ok, _)| *ok) {
        return;
    }
    let all: Vec<String> = results
        .iter()
        .enumerate()
        .map(|(r, (ok, out))| {
            format!(
                "--- rank {r} ({}):\n{out}",
                if *ok { "ok" } else { "FAILED" }
            )
        })
        .collect();
    panic!("{what}: a rank failed\n{}", all.join("\n"));
}

/// Waits for every child (killing all at `limit`); returns (success, output) per rank:
/// success is exit status 0 and the completion marker ([`RANK_COMPLETE`]) printed, not
/// killed for hanging. Their output is read as it comes (a rank that prints more than a
/// pipe holds must not block on it and pass for hung).
pub fn finish(children: Vec<Child>, limit: Duration) -> Vec<(bool, String)> {
    use std::io::Read;
    let deadline = Instant::now() + limit;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let mut running: Vec<_> = children
        .into_iter()
        .map(|mut c| {
            let out = drain(c.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
            let err = drain(c.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
            Some((c, out, err))
        })
        .collect();
    let mut results: Vec<Option<(bool, String)>> = running.iter().map(|_| None).collect();
    let collect = |(mut c, out, err): (
        Child,
        std::thread::JoinHandle<String>,
        std::thread::JoinHandle<String>,
    ),
                   hung: bool| {
        if hung {
            let _ = c.kill();
        }
        let status = c.wait().expect("wait");
        let stdout = out.join().unwrap_or_default();
        let complete = completed(&stdout);
        let text = format!(
            "{stdout}{}{}",
            err.join().unwrap_or_default(),
            if hung {
                "\nHUNG: killed by the test"
            } else if status.success() && !complete {
                "\nINCOMPLETE: exited 0 without printing RANK-COMPLETE (no test ran, or the body ended early)"
            } else {
                ""
            }
        );
        (status.success() && complete && !hung, text)
    };
    while results.iter().any(Option::is_none) {
        let late = Instant::now() > deadline;
        for (i, slot) in running.iter_mut().enumerate() {
            let exited = match slot {
                Some((c, _, _)) => matches!(c.try_wait(), Ok(Some(_))),
                None => continue,
            };
            if exited || late {
                if let Some(child) = slot.take() {
                    results[i] = Some(collect(child, !exited));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    results.into_iter().flatten().collect()
}

/// Starts `n` copies of this test binary running only the test `entry`, with `env(r)` for
/// rank `r` (on top of `RCOLL_RANK` and `RCOLL_WORLD_SIZE`), output piped.
pub fn spawn_ranks(
    entry: &str,
    n: usize,
    env: impl Fn(usize) -> Vec<(String, String)>,
) -> Vec<Child> {
    // One secret per group, as a launcher would hand out.
    let secret =
        rcoll::process::format_unique_id(rcoll::process::random_unique_id().expect("a job secret"));
    (0..n)
        .map(|r| {
            let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
            cmd.args([
                entry,
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "--quiet",
                "--include-ignored",
            ])
            .env("RCOLL_RANK", r.to_string())
            .env("RCOLL_WORLD_SIZE", n.to_string())
            .env("RCOLL_UNIQUE_ID", &secret)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
            for (k, v) in env(r) {
                cmd.env(k, v);
            }
            cmd.spawn().expect("spawn rank")
        })
        .collect()
}

/// Every collective each of `algorithms` serves, at each of `counts`, roots 0 and n-1 for
/// rooted ones, in place and out of place, as f32 sum and i64 max: the failures, described.
pub fn sweep_collectives(
    comm: &mut Communicator,
    algorithms: &[Algorithm],
    counts: &[usize],
) -> Vec<String> {
    let n = comm.size();
    let mut failures = Vec::new();
    for &algorithm in algorithms {
        for collective in Collective::SCHEDULED
            .into_iter()
            .filter(|c| algorithm.serves(*c))
        {
            let roots = if collective.is_rooted() {
                vec![0, n - 1]
            } else {
                vec![0]
            };
            for &count in counts {
                for &root in &roots {
                    for in_place in [false, true] {
                        let r = run_one::<f32>(
                            comm,
                            algorithm,
                            collective,
                            ReduceOp::Sum,
                            count,
                            root,
                            in_place,
                        )
                        .and_then(|()| {
                            run_one::<i64>(
                                comm,
                                algorithm,
                                collective,
                                ReduceOp::Max,
                                count,
                                root,
                                in_place,
                            )
                        });
                        if let Err(e) = r {
                            failures.push(format!(
                                "{algorithm} {collective} count={count} root={root} in_place={in_place}: {e}"
                            ));
                        }
                    }
                }
            }
        }
    }
    failures
}

/// [`run_one`] with the element type named by `dtype`.
#[allow(clippy::too_many_arguments)]
pub fn run_one_of(
    dtype: DataType,
    comm: &mut Communicator,
    algorithm: Algorithm,
    collective: Collective,
    op: ReduceOp,
    count: usize,
    root: usize,
    in_place: bool,
) -> Result<(), String> {
    match dtype {
        DataType::I8 => run_one::<i8>(comm, algorithm, collective, op, count, root, in_place),
        DataType::U8 => run_one::<u8>(comm, algorithm, collective, op, count, root, in_place),
        DataType::I32 => run_one::<i32>(comm, algorithm, collective, op, count, root, in_place),
        DataType::U32 => run_one::<u32>(comm, algorithm, collective, op, count, root, in_place),
        DataType::I64 => run_one::<i64>(comm, algorithm, collective, op, count, root, in_place),
        DataType::U64 => run_one::<u64>(comm, algorithm, collective, op, count, root, in_place),
        DataType::F16 => run_one::<f16>(comm, algorithm, collective, op, count, root, in_place),
        DataType::Bf16 => run_one::<bf16>(comm, algorithm, collective, op, count, root, in_place),
        DataType::F32 => run_one::<f32>(comm, algorithm, collective, op, count, root, in_place),
        DataType::F64 => run_one::<f64>(comm, algorithm, collective, op, count, root, in_place),
        other => Err(format!("no test for {other}")),
    }
}

/// The matrix a real transport runs: every collective x every algorithm of
/// [`Algorithm::ALL`] that serves it x every operation x every element type that supports
/// it (1, 2, 4 and 8 bytes) x in place and out of place. The full product of those;
/// counts (1, 13, 1031) and roots (0, n-1) are taken in turn from call to call rather
/// than multiplied in (a pairwise selection: each count and each root meets every
/// collective, algorithm and placement). A collective that does not reduce runs one
/// type of each size, as Sum. The failures, described; the first stops the matrix (the
/// communicator is poisoned then).
pub fn matrix(comm: &mut Communicator) -> Vec<String> {
    const COUNTS: [usize; 3] = [1, 13, 1031];
    let n = comm.size();
    let mut turn = 0usize;
    let mut calls = 0usize;
    for algorithm in Algorithm::ALL {
        for collective in Collective::SCHEDULED {
            if !algorithm.serves(collective) {
                continue;
            }
            let cases: Vec<(DataType, ReduceOp)> = if collective.reduces() {
                DataType::ALL
                    .into_iter()
                    .flat_map(|d| {
                        ReduceOp::ALL
                            .into_iter()
                            .filter(move |o| d.supports(*o))
                            .map(move |o| (d, o))
                    })
                    .collect()
            } else {
                [DataType::U8, DataType::F16, DataType::I32, DataType::F64]
                    .into_iter()
                    .map(|d| (d, ReduceOp::Sum))
                    .collect()
            };
            for (dtype, op) in cases {
                for in_place in [false, true] {
                    let count = COUNTS[turn % COUNTS.len()];
                    let root = if collective.is_rooted() && (turn / COUNTS.len()) % 2 == 1 {
                        n - 1
                    } else {
                        0
                    };
                    turn += 1;
                    calls += 1;
                    if let Err(e) = run_one_of(
                        dtype, comm, algorithm, collective, op, count, root, in_place,
                    ) {
                        return vec![format!(
                            "{algorithm} {collective} {dtype} {op} count={count} root={root} in_place={in_place} rank {}: {e}",
                            comm.rank()
                        )];
                    }
                }
            }
        }
    }
    println!("MATRIX {calls} calls");
    Vec::new()
}

// Every heap block of a test binary that includes this module is counted, so that the
// soak sees what a rank holds in blocks and bytes rather than its resident pages, which
// move with the allocator's own caching.
#[global_allocator]
static HEAP: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// The heap blocks and bytes this process holds now (rcoll's and the test's own).
pub fn live_heap() -> (i64, i64) {
    let s = HEAP.stats();
    let blocks = s.allocations as i64 - s.deallocations as i64;
    // A reallocation adds its growth to `bytes_allocated` (its shrinking to
    // `bytes_deallocated`) already; `bytes_reallocated` is their running total.
    let bytes = s.bytes_allocated as i64 - s.bytes_deallocated as i64;
    (blocks, bytes)
}

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The soak: 2N mixed collectives, N from `RCOLL_TEST_SOAK` — every scheduled collective,
/// `algorithms`, in place or not, 0 to 300,000 f32, chosen by a generator every rank seeds
/// alike — each result checked, and the heap counted after every call (the test's own
/// buffers are freed by then).
///
/// The claim: what a rank holds is bounded by the largest call it made, not by how many
/// it made. Some memory rightly follows the largest call of its kind (a staging buffer
/// kept for the next one), so a prelude first makes each kind of call — every algorithm x
/// collective x placement — once at the largest size the soak uses; no sample is taken
/// there. After it, the bounded caches (plans, the transports' buffer pools) fill within
/// the first N/2 calls, and the heap after the second N calls is compared with the heap
/// after the first: the median over calls 3N/2..2N must not exceed the largest value over
/// calls N/2..N, in blocks and in bytes. A leak of one block every 10 calls, or of 1 KiB
/// per call, would put the median of N = 2,000 calls 200 blocks or 2 MiB higher; the
/// caches' own swings, from one prepared call to another, are within the window's
/// largest value.
///
/// The transport's own pool (the registered slots of verbs, the spare buffers of TCP) is
/// the one cache whose size follows the timing of a run rather than the calls made: over
/// verbs it grows to the most messages in flight and waiting at once, which the protocol
/// bounds, and never shrinks (a burst would register memory again); over TCP it fills
/// toward its bound in capacity as buffers come back from calls whose timing decides
/// how many are out at once. Its buffers are taken out of the heap judged here, and
/// judged on their own: after every call, each of them is where the transport keeps
/// them (free, lent to a peer, in flight, arrived or lent to the engine), so a buffer
/// lost on the way fails the soak at once.
pub fn soak(comm: &mut Communicator, algorithms: &[Algorithm]) {
    let calls: usize = std::env::var("RCOLL_TEST_SOAK")
        .expect("calls")
        .parse()
        .expect("a number");
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |below: usize| {
        // xorshift64*: the same sequence on every rank.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % below
    };
    const LARGEST: usize = 300_000;
    let n = comm.size();
    for &algorithm in algorithms {
        for collective in Collective::SCHEDULED {
            if !algorithm.serves(collective) {
                continue;
            }
            for in_place in [false, true] {
                let count = (LARGEST - 1) / n * n;
                if let Err(e) = run_one::<f32>(
                    comm,
                    algorithm,
                    collective,
                    ReduceOp::Sum,
                    count,
                    n - 1,
                    in_place,
                ) {
                    panic!("prelude: {algorithm} {collective} of {count} in_place={in_place}: {e}");
                }
            }
        }
    }
    let mut heap = Vec::with_capacity(2 * calls);
    let mut pools = Vec::with_capacity(2 * calls);
    for i in 0..2 * calls {
        let algorithm = algorithms[next(algorithms.len())];
        let served: Vec<Collective> = Collective::SCHEDULED
            .into_iter()
            .filter(|c| algorithm.serves(*c))
            .collect();
        let collective = served[next(served.len())];
        let count = match next(4) {
            0 => next(16),
            1 => next(4096),
            2 => next(65_536),
            _ => next(LARGEST),
        };
        let count = count / comm.size() * comm.size();
        let root = next(comm.size());
        let in_place = next(2) == 1;
        if let Err(e) = run_one::<f32>(
            comm,
            algorithm,
            collective,
            ReduceOp::Sum,
            count,
            root,
            in_place,
        ) {
            panic!("call {i}: {algorithm} {collective} of {count} in_place={in_place}: {e}");
        }
        let pool = comm.statistics();
        assert_eq!(
            pool.pool_accounted,
            pool.pool_buffers,
            "rank {}, call {i}: of the transport's {} pool buffers, {} are where it keeps them",
            comm.rank(),
            pool.pool_buffers,
            pool.pool_accounted
        );
        let (blocks, bytes) = live_heap();
        heap.push((
            blocks - pool.pool_buffers as i64,
            bytes - pool.pool_bytes as i64,
        ));
        pools.push(pool.pool_buffers);
    }
    let window =
        |from: usize, to: usize| -> (Vec<i64>, Vec<i64>) { heap[from..to].iter().copied().unzip() };
    let (blocks_a, bytes_a) = window(calls / 2, calls);
    let (blocks_b, bytes_b) = window(3 * calls / 2, 2 * calls);
    let top = |v: &[i64]| v.iter().copied().max().unwrap_or(0);
    let (top_blocks, top_bytes) = (top(&blocks_a), top(&bytes_a));
    let (med_blocks_a, med_bytes_a) = (median(blocks_a), median(bytes_a));
    let (med_blocks, med_bytes) = (median(blocks_b), median(bytes_b));
    let tenths: Vec<String> = heap
        .chunks((heap.len() / 10).max(1))
        .map(|c| {
            let (blocks, bytes): (Vec<i64>, Vec<i64>) = c.iter().copied().unzip();
            format!("{}/{}K", median(blocks), median(bytes) >> 10)
        })
        .collect();
    println!(
        "SOAK heap by tenth (median blocks/bytes): {}",
        tenths.join(" ")
    );
    let pool_tenths: Vec<String> = pools
        .chunks((pools.len() / 10).max(1))
        .map(|c| format!("{}", c.iter().max().unwrap_or(&0)))
        .collect();
    println!(
        "SOAK transport pool by tenth (most buffers): {}",
        pool_tenths.join(" ")
    );
    println!(
        "SOAK calls {calls}+{calls} heap blocks median {med_blocks_a} (largest {top_blocks}) -> median {med_blocks}; bytes median {med_bytes_a} (largest {top_bytes}) -> median {med_bytes}"
    );
    assert!(
        med_blocks <= top_blocks && med_bytes <= top_bytes,
        "rank {}: the heap grew from the first {calls} calls to the next: blocks {med_blocks_a} (largest {top_blocks}) -> {med_blocks}, bytes {med_bytes_a} (largest {top_bytes}) -> {med_bytes}",
        comm.rank()
    );
}

/// Each rank sends `len` u32 to the next rank and receives from the previous one, checked.
pub fn ring_send_recv(comm: &mut Communicator, len: usize) {
    let (r, n) = (comm.rank(), comm.size());
    let send: Vec<u32> = (0..len).map(|i| (r * 1_000_000 + i) as u32).collect();
    let mut recv = vec![0u32; len];
    comm.send_recv(&send, (r + 1) % n, &mut recv, (r + n - 1) % n)
        .expect("send_recv");
    let from = (r + n - 1) % n;
    let bad = (0..len).find(|&i| recv[i] != (from * 1_000_000 + i) as u32);
    assert_eq!(bad, None, "rank {r}: send_recv from {from}");
}

/// Runs ring all_reduces of `elems` f32 until the group fails (a rank was killed) and
/// checks that the error names rank `RCOLL_TEST_DEAD`; prints it for the parent process.
/// Panics if `iters` calls all succeed.
pub fn all_reduce_until_a_rank_dies(comm: &mut Communicator, elems: usize, iters: usize) {
    let mut v = vec![1.0f32; elems];
    until_a_rank_dies(iters, || {
        comm.with_algorithm(Algorithm::Ring)
            .all_reduce_in_place(&mut v, ReduceOp::Sum)
    });
}

/// Like [`all_reduce_until_a_rank_dies`], with broadcasts of `elems` from rank 0.
#[allow(dead_code)]
pub fn broadcast_until_a_rank_dies(comm: &mut Communicator, elems: usize, iters: usize) {
    let mut v = vec![1.0f32; elems];
    until_a_rank_dies(iters, || comm.broadcast_in_place(&mut v, 0));
}

/// Runs `call` up to `iters` times until it fails, which it must, naming the rank
/// `RCOLL_TEST_DEAD` (prints `RANK-ERROR <error>`).
fn until_a_rank_dies(iters: usize, mut call: impl FnMut() -> rcoll::Result<()>) {
    let dead: usize = std::env::var("RCOLL_TEST_DEAD")
        .expect("dead rank")
        .parse()
        .expect("number");
    for i in 0..iters {
        if let Err(e) = call() {
            println!("RANK-ERROR {e}");
            assert!(
                e.to_string().contains(&format!("rank {dead}")),
                "the error must name rank {dead}: {e}"
            );
            return;
        }
        if i == 0 {
            // Said after a first call finished: once every rank has said it, all are
            // connected and calling in a loop, so a kill lands among the collectives.
            started();
        }
    }
    panic!("the collective kept succeeding without rank {dead}");
}

/// Whether this run is CI's (`CI` set, as `.ci/run` and `ci/test.sh` set it, and not
/// `false` or `0`): there a test that cannot run fails instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Says that the test `name` (or a case of it) did not run, for `reason`: prints
/// `RCOLL-SKIP: <name>: <reason>` on stderr and appends it to the file `RCOLL_SKIP_LOG`
/// names, if any (cargo test shows a passing test's output only with `--nocapture`).
/// `ci/test.sh` lists every skip at the end and fails on one that `ci/allowed-skips.txt`
/// does not list.
pub fn skipped(name: &str, reason: &str) {
    let line = format!("RCOLL-SKIP: {name}: {reason}\n");
    eprint!("{line}");
    if let Some(path) = std::env::var_os("RCOLL_SKIP_LOG") {
        use std::io::Write;
        // One write of the whole line in append mode: lines of tests running at once, in
        // several processes, do not interleave.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!("{name}: cannot record the skip in {path:?}: {e}");
        }
    }
}

/// The test `name` (or a case of it) cannot run here, for `reason`, but CI must run it:
/// under CI ([`in_ci`]) a failure, elsewhere a skip said as [`skipped`] says it.
pub fn cannot_run(name: &str, reason: &str) {
    assert!(
        !in_ci(),
        "{name}: CI must run this test, but it cannot run here: {reason}"
    );
    skipped(name, reason);
}

/// Sends `signal` (`STOP`, `KILL`, ...) to a child process.
#[allow(dead_code)]
pub fn signal(child: &std::process::Child, signal: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{signal}");
}

/// Says this rank finished its first collective and calls more in a loop: prints
/// `RANK-STARTED` and, when the test gave a directory (`RCOLL_TEST_STARTED_DIR`), leaves a
/// file named after the rank there.
#[allow(dead_code)]
pub fn started() {
    println!("RANK-STARTED");
    if let Ok(dir) = std::env::var("RCOLL_TEST_STARTED_DIR") {
        let rank = std::env::var("RCOLL_RANK").unwrap_or_default();
        std::fs::write(format!("{dir}/{rank}"), b"").expect("started marker");
    }
}

/// A fresh directory for [`started`] markers, for `n` ranks: pass it as
/// `RCOLL_TEST_STARTED_DIR`, then [`StartedDir::wait`] until all of them joined.
#[allow(dead_code)]
pub struct StartedDir {
    /// The directory.
    pub path: String,
    n: usize,
}

#[allow(dead_code)]
impl StartedDir {
    /// A fresh, empty directory for `n` ranks' markers.
    pub fn new(n: usize) -> StartedDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = format!(
            "{}/rcoll-started-{}-{k}",
            std::env::temp_dir().display(),
            std::process::id()
        );
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("started dir");
        StartedDir { path, n }
    }

    /// Until every rank left its marker (at most `within`): each has finished a
    /// collective with all the others and is calling the next ones ([`started`]).
    pub fn wait(&self, within: Duration) {
        let until = std::time::Instant::now() + within;
        while std::fs::read_dir(&self.path).map_or(0, |d| d.count()) < self.n {
            assert!(
                std::time::Instant::now() < until,
                "ranks did not all join in {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for StartedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Rank `r`'s contribution to element `i` of the shrink tests' all_reduce at step `s`:
/// small integers, whose sum any reference gets exactly.
pub fn shrink_contribution(r: usize, s: usize, i: usize) -> i64 {
    ((r as i64 + 1) << 20) + (s as i64) * 1000 + (i % 977) as i64
}

/// The sum of [`shrink_contribution`] over `members`, computed apart from rcoll.
pub fn shrink_expected(members: &[usize], s: usize, i: usize) -> i64 {
    members.iter().map(|&r| shrink_contribution(r, s, i)).sum()
}

/// SIGKILL to this process from another thread, while this one goes on (into its call).
pub fn kill_myself_soon() {
    let pid = std::process::id().to_string();
    std::thread::spawn(move || {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
    });
}
