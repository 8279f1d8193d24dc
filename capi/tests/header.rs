//! `capi/include/rcoll.h` is exactly what cbindgen makes of `capi/src` today: the header
//! users compile against matches the library they link. `RCOLL_BLESS=1` rewrites it.

use std::path::Path;

#[test]
fn the_checked_in_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen");
    let mut made = Vec::new();
    bindings.write(&mut made);
    let made = String::from_utf8(made).expect("utf-8");
    let path = dir.join("include/rcoll.h");
    if std::env::var("RCOLL_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, &made).expect("write rcoll.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == made,
        "capi/include/rcoll.h is not what cbindgen makes of capi/src: run \
         `RCOLL_BLESS=1 cargo test -p rcoll-capi --test header` and commit it"
    );
    // The declarations the C API promises, spelled as promised.
    for line in [
        "typedef rcollComm *rcollComm_t;",
        "} rcollDataType_t;",
        "} rcollRedOp_t;",
        "rcollResult_t rcollAllReduce(const void *sendbuff,",
        "rcollDataType_t datatype,",
        "rcollRedOp_t op,",
        "#define RCOLL_UNIQUE_ID_BYTES 128",
    ] {
        assert!(made.contains(line), "rcoll.h lacks {line:?}:\n{made}");
    }
}
