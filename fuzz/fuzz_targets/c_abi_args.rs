//! The C ABI's argument checks, called as a C program calls them (through the exported
//! symbols, with C's types): collectives, nonblocking calls, tests, waits and queries with
//! arguments from arbitrary bytes — element types and operations of any int, roots of any
//! int, counts up to 4,096 over buffers that hold them, NULL and misaligned buffers,
//! handles live, made up or already freed — on a communicator of one rank. Every call
//! returns one of the header's result codes, never rcollInternalError (a panic caught at
//! the boundary), and nothing crashes.
//!
//! librcoll.so is linked as a C program links it: ci/fuzz.sh builds it first with the
//! same instrumentation, so that libFuzzer sees its coverage (`build.rs`).
#![no_main]

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;

#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId([u8; 128]);

type Comm = *mut c_void;
type Request = *mut c_void;

extern "C" {
    fn rcollGetUniqueId(id: *mut UniqueId) -> c_int;
    fn rcollCommInitRank(comm: *mut Comm, nranks: c_int, id: UniqueId, rank: c_int) -> c_int;
    fn rcollCommCount(comm: Comm, count: *mut c_int) -> c_int;
    fn rcollCommUserRank(comm: Comm, rank: *mut c_int) -> c_int;
    fn rcollCommDestroy(comm: Comm) -> c_int;
    fn rcollAllReduce(s: *const c_void, r: *mut c_void, n: usize, t: c_int, op: c_int, c: Comm)
        -> c_int;
    fn rcollBroadcast(s: *const c_void, r: *mut c_void, n: usize, t: c_int, root: c_int, c: Comm)
        -> c_int;
    fn rcollReduce(
        s: *const c_void,
        r: *mut c_void,
        n: usize,
        t: c_int,
        op: c_int,
        root: c_int,
        c: Comm,
    ) -> c_int;
    fn rcollAllGather(s: *const c_void, r: *mut c_void, n: usize, t: c_int, c: Comm) -> c_int;
    fn rcollReduceScatter(
        s: *const c_void,
        r: *mut c_void,
        n: usize,
        t: c_int,
        op: c_int,
        c: Comm,
    ) -> c_int;
    fn rcollAllToAll(s: *const c_void, r: *mut c_void, n: usize, t: c_int, c: Comm) -> c_int;
    fn rcollGather(s: *const c_void, r: *mut c_void, n: usize, t: c_int, root: c_int, c: Comm)
        -> c_int;
    fn rcollScatter(s: *const c_void, r: *mut c_void, n: usize, t: c_int, root: c_int, c: Comm)
        -> c_int;
    fn rcollBarrier(c: Comm) -> c_int;
    fn rcollIAllReduce(
        s: *const c_void,
        r: *mut c_void,
        n: usize,
        t: c_int,
        op: c_int,
        c: Comm,
        req: *mut Request,
    ) -> c_int;
    fn rcollTest(req: Request, done: *mut c_int) -> c_int;
    fn rcollWait(req: Request) -> c_int;
}

/// The live communicator (as an address: handles are plain values) and requests made.
static STATE: Mutex<Option<(usize, Vec<usize>)>> = Mutex::new(None);

/// A one-rank communicator, made again when the input destroyed it.
fn communicator(state: &mut Option<(usize, Vec<usize>)>) -> Comm {
    if let Some((c, _)) = state {
        let mut n = 0;
        // SAFETY: any handle value is accepted (looked up, never dereferenced); `n` lives.
        if unsafe { rcollCommCount(*c as Comm, &mut n) } == 0 {
            return *c as Comm;
        }
    }
    let mut id = UniqueId([0; 128]);
    let mut comm: Comm = std::ptr::null_mut();
    // SAFETY: both out-pointers are to live locals of the right types.
    unsafe {
        assert_eq!(rcollGetUniqueId(&mut id), 0);
        assert_eq!(rcollCommInitRank(&mut comm, 1, id, 0), 0, "a one-rank communicator");
    }
    let old = state.replace((comm as usize, Vec::new()));
    drop(old);
    comm
}

/// The arguments, read from the input in turn (zeros once it ends).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else { return 0 };
        self.0 = rest;
        b
    }
    fn int(&mut self) -> c_int {
        c_int::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    /// Mostly small values near the valid ones, sometimes any int.
    fn small_or_any(&mut self) -> c_int {
        match self.byte() % 4 {
            0 => self.int(),
            k => c_int::from(k) - 2 + c_int::from(self.byte() % 12),
        }
    }
}

fn check(code: c_int, what: &str) {
    assert!((0..=8).contains(&code) && code != 1, "{what}: result {code}");
    assert_ne!(code, 3, "{what}: rcollInternalError (a panic)");
}

fuzz_target!(|data: &[u8]| {
    let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let live = communicator(&mut state);
    let mut input = Input(data);
    // Buffers of u64 (aligned for every type), 4,096 elements of 8 bytes and a spare word
    // for the misaligned case.
    let mut send = vec![0x0101_0101_0101_0101u64; 4097];
    let mut recv = vec![0u64; 4097];
    while !input.0.is_empty() {
        let call = input.byte() % 14;
        let count = usize::from(u16::from_le_bytes([input.byte(), input.byte()])) % 4097;
        let dtype = input.small_or_any();
        let op = input.small_or_any();
        let root = input.small_or_any();
        let comm = match input.byte() % 8 {
            0 => input.int() as isize as usize as Comm,
            1 => std::ptr::null_mut(),
            _ => live,
        };
        let base_s = send.as_mut_ptr().cast::<u8>();
        let base_r = recv.as_mut_ptr().cast::<u8>();
        let (s, r): (*mut u8, *mut u8) = match input.byte() % 6 {
            0 => (std::ptr::null_mut(), base_r),
            1 => (base_s, std::ptr::null_mut()),
            // Misaligned for every type wider than a byte.
            2 => (base_s.wrapping_add(1), base_r.wrapping_add(1)),
            // In place.
            3 => (base_r, base_r),
            _ => (base_s, base_r),
        };
        let (s, r) = (s as *const c_void, r as *mut c_void);
        // SAFETY: as a C program would call them: every buffer holds 4,096 elements of
        // up to 8 bytes (one rank: no call reads or writes more than `count` of them)
        // from its start or its second byte, or is NULL; out-pointers are live locals;
        // handles are any value (looked up, never dereferenced).
        unsafe {
            let code = match call {
                0 => rcollAllReduce(s, r, count, dtype, op, comm),
                1 => rcollBroadcast(s, r, count, dtype, root, comm),
                2 => rcollReduce(s, r, count, dtype, op, root, comm),
                3 => rcollAllGather(s, r, count, dtype, comm),
                4 => rcollReduceScatter(s, r, count, dtype, op, comm),
                5 => rcollAllToAll(s, r, count, dtype, comm),
                6 => rcollGather(s, r, count, dtype, root, comm),
                7 => rcollScatter(s, r, count, dtype, root, comm),
                8 => rcollBarrier(comm),
                9 => {
                    let mut req: Request = std::ptr::null_mut();
                    let code = rcollIAllReduce(s, r, count, dtype, op, comm, &mut req);
                    if code == 0 {
                        // Completed before the buffers go: waited on at once here.
                        check(rcollWait(req), "rcollWait");
                        if let Some((_, reqs)) = state.as_mut() {
                            reqs.push(req as usize);
                        }
                    }
                    code
                }
                // A request already completed (freed), or made up.
                10 | 11 => {
                    let stale = state
                        .as_ref()
                        .and_then(|(_, reqs)| reqs.last().copied())
                        .filter(|_| call == 10)
                        .unwrap_or(input.int() as isize as usize);
                    let mut done = 0;
                    let code = rcollTest(stale as Request, &mut done);
                    check(code, "rcollTest");
                    rcollWait(stale as Request)
                }
                12 => {
                    let (mut n, mut me) = (0, 0);
                    check(rcollCommCount(comm, &mut n), "rcollCommCount");
                    rcollCommUserRank(comm, &mut me)
                }
                // Destroying a made-up handle (the live one is made again if it was).
                _ => rcollCommDestroy(input.int() as isize as usize as Comm),
            };
            check(code, "a call");
        }
    }
    drop(live);
});
