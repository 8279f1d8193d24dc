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

/// `(C expression printed as %zu, Rust value, rule)`.
fn expectations() -> Vec<(String, usize, Rule)> {
    let mut v: Vec<(String, usize, Rule)> = Vec::new();
    let mut offset = |c_struct: &str, c_field: &str, rust: usize| {
        v.push((
            format!("offsetof(struct {c_struct}, {c_field})"),
            rust,
            Rule::Equal,
        ));
    };
    offset("ibv_context", "ops", offset_of!(ibv_context, ops));
    offset(
        "ibv_context",
        "ops.poll_cq",
        offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, poll_cq),
    );
    offset(
        "ibv_context",
        "ops.req_notify_cq",
        offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, req_notify_cq),
    );
    offset(
        "ibv_context",
        "ops.post_send",
        offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_send),
    );
    offset(
        "ibv_context",
        "ops.post_recv",
        offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_recv),
    );
    offset("ibv_comp_channel", "fd", offset_of!(ibv_comp_channel, fd));
    offset("ibv_cq", "context", offset_of!(ibv_cq, context));
    offset("ibv_qp", "context", offset_of!(ibv_qp, context));
    offset("ibv_qp", "qp_num", offset_of!(ibv_qp, qp_num));
    offset("ibv_mr", "lkey", offset_of!(ibv_mr, lkey));
    offset("ibv_mr", "rkey", offset_of!(ibv_mr, rkey));
    offset("ibv_sge", "addr", offset_of!(ibv_sge, addr));
    offset("ibv_sge", "length", offset_of!(ibv_sge, length));
    offset("ibv_sge", "lkey", offset_of!(ibv_sge, lkey));
    offset("ibv_send_wr", "wr_id", offset_of!(ibv_send_wr, wr_id));
    offset("ibv_send_wr", "next", offset_of!(ibv_send_wr, next));
    offset("ibv_send_wr", "sg_list", offset_of!(ibv_send_wr, sg_list));
    offset("ibv_send_wr", "num_sge", offset_of!(ibv_send_wr, num_sge));
    offset("ibv_send_wr", "opcode", offset_of!(ibv_send_wr, opcode));
    offset(
        "ibv_send_wr",
        "send_flags",
        offset_of!(ibv_send_wr, send_flags),
    );
    offset("ibv_send_wr", "imm_data", offset_of!(ibv_send_wr, imm_data));
    offset(
        "ibv_send_wr",
        "wr.rdma.remote_addr",
        offset_of!(ibv_send_wr, remote_addr),
    );
    offset("ibv_send_wr", "wr.rdma.rkey", offset_of!(ibv_send_wr, rkey));
    offset("ibv_recv_wr", "wr_id", offset_of!(ibv_recv_wr, wr_id));
    offset("ibv_recv_wr", "next", offset_of!(ibv_recv_wr, next));
    offset("ibv_recv_wr", "sg_list", offset_of!(ibv_recv_wr, sg_list));
    offset("ibv_recv_wr", "num_sge", offset_of!(ibv_recv_wr, num_sge));
    offset("ibv_wc", "wr_id", offset_of!(ibv_wc, wr_id));
    offset("ibv_wc", "status", offset_of!(ibv_wc, status));
    offset("ibv_wc", "opcode", offset_of!(ibv_wc, opcode));
    offset("ibv_wc", "vendor_err", offset_of!(ibv_wc, vendor_err));
    offset("ibv_wc", "byte_len", offset_of!(ibv_wc, byte_len));
    offset("ibv_wc", "imm_data", offset_of!(ibv_wc, imm_data));
    offset("ibv_wc", "qp_num", offset_of!(ibv_wc, qp_num));
    offset(
        "ibv_qp_init_attr",
        "send_cq",
        offset_of!(ibv_qp_init_attr, send_cq),
    );
    offset(
        "ibv_qp_init_attr",
        "recv_cq",
        offset_of!(ibv_qp_init_attr, recv_cq),
    );
    offset("ibv_qp_init_attr", "cap", offset_of!(ibv_qp_init_attr, cap));
    offset(
        "ibv_qp_init_attr",
        "cap.max_inline_data",
        offset_of!(ibv_qp_init_attr, cap) + offset_of!(ibv_qp_cap, max_inline_data),
    );
    offset(
        "ibv_qp_init_attr",
        "qp_type",
        offset_of!(ibv_qp_init_attr, qp_type),
    );
    offset("ibv_qp_attr", "qp_state", offset_of!(ibv_qp_attr, qp_state));
    offset("ibv_qp_attr", "path_mtu", offset_of!(ibv_qp_attr, path_mtu));
    offset("ibv_qp_attr", "rq_psn", offset_of!(ibv_qp_attr, rq_psn));
    offset("ibv_qp_attr", "sq_psn", offset_of!(ibv_qp_attr, sq_psn));
    offset(
        "ibv_qp_attr",
        "dest_qp_num",
        offset_of!(ibv_qp_attr, dest_qp_num),
    );
    offset(
        "ibv_qp_attr",
        "qp_access_flags",
        offset_of!(ibv_qp_attr, qp_access_flags),
    );
    offset("ibv_qp_attr", "ah_attr", offset_of!(ibv_qp_attr, ah_attr));
    for (c, rust) in [
        ("grh.dgid", offset_of!(ibv_ah_attr, grh.dgid)),
        ("grh.flow_label", offset_of!(ibv_ah_attr, grh.flow_label)),
        ("grh.sgid_index", offset_of!(ibv_ah_attr, grh.sgid_index)),
        ("grh.hop_limit", offset_of!(ibv_ah_attr, grh.hop_limit)),
        (
            "grh.traffic_class",
            offset_of!(ibv_ah_attr, grh.traffic_class),
        ),
        ("dlid", offset_of!(ibv_ah_attr, dlid)),
        ("sl", offset_of!(ibv_ah_attr, sl)),
        ("src_path_bits", offset_of!(ibv_ah_attr, src_path_bits)),
        ("is_global", offset_of!(ibv_ah_attr, is_global)),
        ("port_num", offset_of!(ibv_ah_attr, port_num)),
    ] {
        offset("ibv_ah_attr", c, rust);
    }
    offset(
        "ibv_qp_attr",
        "pkey_index",
        offset_of!(ibv_qp_attr, pkey_index),
    );
    offset(
        "ibv_qp_attr",
        "max_rd_atomic",
        offset_of!(ibv_qp_attr, max_rd_atomic),
    );
    offset(
        "ibv_qp_attr",
        "max_dest_rd_atomic",
        offset_of!(ibv_qp_attr, max_dest_rd_atomic),
    );
    offset(
        "ibv_qp_attr",
        "min_rnr_timer",
        offset_of!(ibv_qp_attr, min_rnr_timer),
    );
    offset("ibv_qp_attr", "port_num", offset_of!(ibv_qp_attr, port_num));
    offset("ibv_qp_attr", "timeout", offset_of!(ibv_qp_attr, timeout));
    offset(
        "ibv_qp_attr",
        "retry_cnt",
        offset_of!(ibv_qp_attr, retry_cnt),
    );
    offset(
        "ibv_qp_attr",
        "rnr_retry",
        offset_of!(ibv_qp_attr, rnr_retry),
    );
    offset("ibv_port_attr", "state", offset_of!(ibv_port_attr, state));
    offset(
        "ibv_port_attr",
        "max_mtu",
        offset_of!(ibv_port_attr, max_mtu),
    );
    offset(
        "ibv_port_attr",
        "active_mtu",
        offset_of!(ibv_port_attr, active_mtu),
    );
    offset(
        "ibv_port_attr",
        "gid_tbl_len",
        offset_of!(ibv_port_attr, gid_tbl_len),
    );
    offset(
        "ibv_port_attr",
        "max_msg_sz",
        offset_of!(ibv_port_attr, max_msg_sz),
    );
    offset("ibv_port_attr", "lid", offset_of!(ibv_port_attr, lid));
    offset(
        "ibv_port_attr",
        "link_layer",
        offset_of!(ibv_port_attr, link_layer),
    );
    offset(
        "ibv_device_attr",
        "max_mr_size",
        offset_of!(ibv_device_attr, max_mr_size),
    );
    offset(
        "ibv_device_attr",
        "max_qp_wr",
        offset_of!(ibv_device_attr, max_qp_wr),
    );
    offset(
        "ibv_device_attr",
        "max_cqe",
        offset_of!(ibv_device_attr, max_cqe),
    );
    offset(
        "ibv_device_attr",
        "phys_port_cnt",
        offset_of!(ibv_device_attr, phys_port_cnt),
    );

    // Structs rcoll allocates and hands to the library.
    for (c_type, rust, rule) in [
        ("union ibv_gid", size_of::<ibv_gid>(), Rule::Equal),
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

    let unsigned = |x: u32| x as usize;
    let signed = |x: i32| x as usize;
    for (c, rust) in [
        ("IBV_ACCESS_LOCAL_WRITE", signed(IBV_ACCESS_LOCAL_WRITE)),
        ("IBV_ACCESS_REMOTE_WRITE", signed(IBV_ACCESS_REMOTE_WRITE)),
        ("IBV_QPT_RC", unsigned(IBV_QPT_RC)),
        ("IBV_QPS_INIT", unsigned(IBV_QPS_INIT)),
        ("IBV_QPS_RTR", unsigned(IBV_QPS_RTR)),
        ("IBV_QPS_RTS", unsigned(IBV_QPS_RTS)),
        ("IBV_QPS_ERR", unsigned(IBV_QPS_ERR)),
        (
            "IBV_WR_RDMA_WRITE_WITH_IMM",
            unsigned(IBV_WR_RDMA_WRITE_WITH_IMM),
        ),
        ("IBV_WR_SEND", unsigned(IBV_WR_SEND)),
        ("IBV_SEND_SIGNALED", unsigned(IBV_SEND_SIGNALED)),
        ("IBV_SEND_INLINE", unsigned(IBV_SEND_INLINE)),
        ("IBV_WC_SUCCESS", unsigned(IBV_WC_SUCCESS)),
        ("IBV_WC_RECV", unsigned(IBV_WC_RECV)),
        (
            "IBV_WC_RECV_RDMA_WITH_IMM",
            unsigned(IBV_WC_RECV_RDMA_WITH_IMM),
        ),
        ("IBV_QP_STATE", signed(IBV_QP_STATE)),
        ("IBV_QP_ACCESS_FLAGS", signed(IBV_QP_ACCESS_FLAGS)),
        ("IBV_QP_PKEY_INDEX", signed(IBV_QP_PKEY_INDEX)),
        ("IBV_QP_PORT", signed(IBV_QP_PORT)),
        ("IBV_QP_AV", signed(IBV_QP_AV)),
        ("IBV_QP_PATH_MTU", signed(IBV_QP_PATH_MTU)),
        ("IBV_QP_TIMEOUT", signed(IBV_QP_TIMEOUT)),
        ("IBV_QP_RETRY_CNT", signed(IBV_QP_RETRY_CNT)),
        ("IBV_QP_RNR_RETRY", signed(IBV_QP_RNR_RETRY)),
        ("IBV_QP_RQ_PSN", signed(IBV_QP_RQ_PSN)),
        ("IBV_QP_MAX_QP_RD_ATOMIC", signed(IBV_QP_MAX_QP_RD_ATOMIC)),
        ("IBV_QP_MIN_RNR_TIMER", signed(IBV_QP_MIN_RNR_TIMER)),
        ("IBV_QP_SQ_PSN", signed(IBV_QP_SQ_PSN)),
        ("IBV_QP_DEST_QPN", signed(IBV_QP_DEST_QPN)),
        (
            "IBV_QP_MAX_DEST_RD_ATOMIC",
            signed(IBV_QP_MAX_DEST_RD_ATOMIC),
        ),
        (
            "IBV_LINK_LAYER_INFINIBAND",
            usize::from(IBV_LINK_LAYER_INFINIBAND),
        ),
        ("IBV_PORT_ACTIVE", unsigned(IBV_PORT_ACTIVE)),
    ] {
        v.push((format!("(size_t){c}"), rust, Rule::Equal));
    }
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
        eprintln!("skipped: {HEADER} is not installed (libibverbs-dev)");
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
