//! The layouts and constants of `sys` against the C headers: a small C program prints
//! `offsetof`, `sizeof` and each constant as the installed `<infiniband/verbs.h>` has them,
//! and every value is compared with the Rust side's.
//!
//! Without the headers the test says so and passes, unless `CI` or
//! `RCOLL_REQUIRE_VERBS_HEADERS` is set (CI installs libibverbs-dev, so there it always runs).

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command;

use super::*;

const HEADER: &str = "/usr/include/infiniband/verbs.h";

/// How a Rust value must relate to the C one.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rule {
    Equal,
    /// Rust's struct may be larger (room for newer library versions to write into).
    AtLeast,
}

/// Pushes `offsetof(struct T, field)` against Rust's `offset_of!(T, field)` for each field.
macro_rules! offsets {
    ($v:ident, $t:ident: $($f:ident),+ $(,)?) => {
        $($v.push((
            format!("offsetof(struct {}, {})", stringify!($t), stringify!($f)),
            offset_of!($t, $f),
            Rule::Equal,
        ));)+
    };
}

/// Pushes each constant's C value against Rust's.
macro_rules! constants {
    ($v:ident: $($c:ident),+ $(,)?) => {
        $($v.push((format!("(size_t){}", stringify!($c)), $c as usize, Rule::Equal));)+
    };
}

/// `(C expression printed as %zu, Rust value, rule)`.
fn expectations() -> Vec<(String, usize, Rule)> {
    let mut v: Vec<(String, usize, Rule)> = Vec::new();
    offsets!(v, ibv_context: ops);
    offsets!(v, ibv_comp_channel: fd);
    offsets!(v, ibv_cq: context);
    offsets!(v, ibv_qp: context, qp_num);
    offsets!(v, ibv_mr: lkey, rkey);
    offsets!(v, ibv_pd: context);
    offsets!(v, ibv_mw: context, rkey);
    offsets!(v, ibv_sge: addr, length, lkey);
    offsets!(v, ibv_gid_entry: gid, gid_index, port_num, gid_type, ndev_ifindex);
    offsets!(v, ibv_send_wr: wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data);
    offsets!(v, ibv_recv_wr: wr_id, next, sg_list, num_sge);
    offsets!(v, ibv_wc: wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num);
    offsets!(v, ibv_wc: wc_flags);
    offsets!(v, ibv_qp_init_attr: send_cq, recv_cq, cap, qp_type);
    offsets!(v, ibv_qp_attr: qp_state, path_mtu, rq_psn, sq_psn, dest_qp_num, qp_access_flags);
    offsets!(v, ibv_qp_attr: ah_attr, pkey_index, max_rd_atomic, max_dest_rd_atomic);
    offsets!(v, ibv_qp_attr: min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry);
    offsets!(v, ibv_ah_attr: dlid, sl, src_path_bits, is_global, port_num);
    offsets!(v, ibv_global_route: dgid, flow_label, sgid_index, hop_limit, traffic_class);
    offsets!(v, ibv_port_attr: state, max_mtu, active_mtu, gid_tbl_len, max_msg_sz, lid);
    offsets!(v, ibv_port_attr: link_layer);
    offsets!(v, ibv_device_attr: max_mr_size, max_qp_wr, max_cqe, phys_port_cnt);
    // Fields whose C path differs from the Rust name: nested, or in an anonymous union.
    let ops = offset_of!(ibv_context, ops);
    for (c_path, rust) in [
        (
            "ibv_context, ops.poll_cq",
            ops + offset_of!(ibv_context_ops, poll_cq),
        ),
        (
            "ibv_context, ops.req_notify_cq",
            ops + offset_of!(ibv_context_ops, req_notify_cq),
        ),
        (
            "ibv_context, ops.alloc_mw",
            ops + offset_of!(ibv_context_ops, alloc_mw),
        ),
        (
            "ibv_context, ops.dealloc_mw",
            ops + offset_of!(ibv_context_ops, dealloc_mw),
        ),
        (
            "ibv_send_wr, invalidate_rkey",
            offset_of!(ibv_send_wr, imm_data),
        ),
        ("ibv_send_wr, bind_mw.mw", offset_of!(ibv_send_wr, bind_mw)),
        (
            "ibv_send_wr, bind_mw.rkey",
            offset_of!(ibv_send_wr, bind_rkey),
        ),
        (
            "ibv_send_wr, bind_mw.bind_info.mr",
            offset_of!(ibv_send_wr, bind_mr),
        ),
        (
            "ibv_send_wr, bind_mw.bind_info.addr",
            offset_of!(ibv_send_wr, bind_addr),
        ),
        (
            "ibv_send_wr, bind_mw.bind_info.length",
            offset_of!(ibv_send_wr, bind_length),
        ),
        (
            "ibv_send_wr, bind_mw.bind_info.mw_access_flags",
            offset_of!(ibv_send_wr, bind_access),
        ),
        ("ibv_wc, invalidated_rkey", offset_of!(ibv_wc, imm_data)),
        (
            "ibv_context, ops.post_send",
            ops + offset_of!(ibv_context_ops, post_send),
        ),
        (
            "ibv_context, ops.post_recv",
            ops + offset_of!(ibv_context_ops, post_recv),
        ),
        (
            "ibv_send_wr, wr.rdma.remote_addr",
            offset_of!(ibv_send_wr, remote_addr),
        ),
        ("ibv_send_wr, wr.rdma.rkey", offset_of!(ibv_send_wr, rkey)),
        (
            "ibv_qp_init_attr, cap.max_inline_data",
            offset_of!(ibv_qp_init_attr, cap) + offset_of!(ibv_qp_cap, max_inline_data),
        ),
        ("ibv_ah_attr, grh", offset_of!(ibv_ah_attr, grh)),
    ] {
        v.push((format!("offsetof(struct {c_path})"), rust, Rule::Equal));
    }

    // Structs rcoll allocates and hands to the library.
    for (c_type, rust, rule) in [
        ("union ibv_gid", size_of::<ibv_gid>(), Rule::Equal),
        (
            "struct ibv_gid_entry",
            size_of::<ibv_gid_entry>(),
            Rule::Equal,
        ),
        ("struct ibv_sge", size_of::<ibv_sge>(), Rule::Equal),
        ("struct ibv_send_wr", size_of::<ibv_send_wr>(), Rule::Equal),
        ("struct ibv_recv_wr", size_of::<ibv_recv_wr>(), Rule::Equal),
        ("struct ibv_wc", size_of::<ibv_wc>(), Rule::Equal),
        (
            "struct ibv_qp_init_attr",
            size_of::<ibv_qp_init_attr>(),
            Rule::Equal,
        ),
        ("struct ibv_qp_attr", size_of::<ibv_qp_attr>(), Rule::Equal),
        (
            "struct ibv_device_attr",
            size_of::<ibv_device_attr>(),
            Rule::Equal,
        ),
        (
            "struct ibv_port_attr",
            size_of::<ibv_port_attr>(),
            Rule::AtLeast,
        ),
        (
            "struct ibv_context_ops",
            size_of::<ibv_context_ops>(),
            Rule::Equal,
        ),
    ] {
        v.push((format!("sizeof({c_type})"), rust, rule));
    }

    constants!(v: IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_QPT_RC);
    constants!(v: IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_ERR);
    constants!(v: IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_SEND_SIGNALED, IBV_SEND_INLINE);
    constants!(v: IBV_WC_SUCCESS, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM);
    constants!(v: IBV_ACCESS_MW_BIND, IBV_MW_TYPE_2, IBV_WR_RDMA_WRITE, IBV_WR_BIND_MW);
    constants!(v: IBV_WR_SEND_WITH_INV, IBV_WC_WITH_INV);
    constants!(v: IBV_QP_STATE, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_AV);
    constants!(v: IBV_QP_PATH_MTU, IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY);
    constants!(v: IBV_QP_RQ_PSN, IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN);
    constants!(v: IBV_QP_DEST_QPN, IBV_QP_MAX_DEST_RD_ATOMIC);
    constants!(v: IBV_LINK_LAYER_INFINIBAND, IBV_PORT_ACTIVE);
    constants!(v: IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2);
    v
}

/// Compiles and runs the C side; `None` when the headers are not installed.
fn c_values(exprs: &[String]) -> Option<BTreeMap<String, usize>> {
    if !std::path::Path::new(HEADER).exists() {
        return None;
    }
    let dir = std::env::temp_dir().join(format!("rcoll-verbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let mut src = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for e in exprs {
        src.push_str(&format!("  printf(\"%zu\\n\", (size_t)({e}));\n"));
    }
    src.push_str("  return 0;\n}\n");
    let c = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&c, src).expect("write the C program");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("{cc} is needed with the verbs headers: {e}"));
    assert!(
        out.status.success(),
        "compiling the layout program failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the layout program");
    assert!(run.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(run.stdout).expect("numbers");
    let values: Vec<usize> = text
        .lines()
        .map(|l| l.trim().parse().expect("a number"))
        .collect();
    assert_eq!(values.len(), exprs.len());
    Some(exprs.iter().cloned().zip(values).collect())
}

#[test]
fn layouts_match_the_c_headers() {
    let expected = expectations();
    let exprs: Vec<String> = expected.iter().map(|(e, _, _)| e.clone()).collect();
    let Some(c) = c_values(&exprs) else {
        let required = std::env::var_os("CI").is_some()
            || std::env::var_os("RCOLL_REQUIRE_VERBS_HEADERS").is_some();
        assert!(
            !required,
            "{HEADER} is missing: install libibverbs-dev (ci/deps.sh does)"
        );
        eprintln!(
            "RCOLL-SKIP: layouts_match_the_c_headers: {HEADER} is not installed (libibverbs-dev)"
        );
        return;
    };
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(e, rust, rule)| match rule {
            Rule::Equal => c[e] != *rust,
            Rule::AtLeast => *rust < c[e],
        })
        .map(|(e, rust, rule)| format!("{e}: C {} vs Rust {rust} ({rule:?})", c[e]))
        .collect();
    assert!(
        wrong.is_empty(),
        "the Rust layouts differ from {HEADER}:\n  {}",
        wrong.join("\n  ")
    );
    eprintln!(
        "{} offsets, sizes and constants match {HEADER}",
        expected.len()
    );
}

#[test]
fn a_missing_library_is_a_typed_error_naming_the_fix() {
    // `load` reads RCOLL_IBVERBS_LIB; call its pieces with a name that cannot exist
    // rather than touching this process's environment.
    let name = std::ffi::CString::new("libibverbs-does-not-exist.so.9").expect("no NUL");
    // SAFETY: a NUL-terminated name.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(handle.is_null());
    let e = LoadError::Library {
        tried: "libibverbs-does-not-exist.so.9".into(),
        dlerror: last_dlerror(),
    };
    let text = e.to_string();
    assert!(text.contains("not found: install rdma-core"), "{text}");
    assert!(text.contains("cannot open shared object"), "{text}");
}

#[test]
fn a_missing_symbol_names_symbol_and_version() {
    // libc is loaded in every process: it has no verbs.
    let name = std::ffi::CString::new("libc.so.6").expect("no NUL");
    // SAFETY: a NUL-terminated name.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null());
    match Lib::resolve(handle, "libc.so.6".into()) {
        Err(LoadError::Symbol {
            symbol, version, ..
        }) => {
            assert_eq!(symbol, "ibv_get_device_list");
            assert_eq!(version, "IBVERBS_1.1");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("libc resolved as libibverbs"),
    }
}
