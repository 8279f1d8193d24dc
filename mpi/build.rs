//! Compiles src/shim.c with the MPI compiler wrapper (`mpicc`, or `$RCOLL_MPICC` such as
//! `mpicc.mpich`), links the MPI library it names, and tells the Rust side how this MPI
//! represents its handles: `cfg(mpi_handles = "pointer")` (Open MPI: pointers to structs)
//! or `cfg(mpi_handles = "int")` (MPICH and its derivatives: integers).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=RCOLL_MPICC");
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rustc-check-cfg=cfg(mpi_handles, values(\"pointer\", \"int\"))");
    let mpicc = std::env::var("RCOLL_MPICC").unwrap_or_else(|_| "mpicc".into());
    let show = match Command::new(&mpicc).arg("-show").output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => fail(
            &mpicc,
            &format!(
                "`{mpicc} -show` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        ),
        Err(e) => fail(&mpicc, &format!("cannot run {mpicc}: {e}")),
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let handles = probe_handles(&mpicc, &out);
    println!("cargo:rustc-cfg=mpi_handles=\"{handles}\"");

    cc::Build::new()
        .compiler(&mpicc)
        .file("src/shim.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("rcoll_mpi_shim");

    // The wrapper's link line: where the MPI library is and its name (-lmpi, -lmpich).
    let mut words = show.split_whitespace().skip(1).peekable();
    while let Some(w) = words.next() {
        if let Some(dir) = w.strip_prefix("-L") {
            let dir = if dir.is_empty() {
                words.next().unwrap_or_default()
            } else {
                dir
            };
            println!("cargo:rustc-link-search=native={dir}");
            // The test binaries and the library find it without LD_LIBRARY_PATH.
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        } else if let Some(lib) = w.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        } else if let Some(flags) = w.strip_prefix("-Wl,") {
            if flags.starts_with("-rpath") || flags.starts_with("--enable-new-dtags") {
                println!("cargo:rustc-link-arg={w}");
            }
        }
    }
}

/// "pointer" or "int": which of the two handle representations this MPI's `MPI_Comm`,
/// `MPI_Datatype`, `MPI_Op`, `MPI_Request` and `MPI_Errhandler` have (checked by
/// compiling a probe, whatever the vendor).
fn probe_handles(mpicc: &str, out: &Path) -> &'static str {
    let handles = [
        "MPI_Comm",
        "MPI_Datatype",
        "MPI_Op",
        "MPI_Request",
        "MPI_Errhandler",
    ];
    let kinds = [
        // GCC and Clang: 5 is pointer_type_class.
        (
            "pointer",
            "sizeof(T) == sizeof(void *) && __builtin_classify_type((T)0) == 5",
        ),
        ("int", "__builtin_types_compatible_p(T, int)"),
    ];
    for (kind, test) in kinds {
        let mut src = String::from("#include <mpi.h>\n");
        for h in handles {
            src += &format!("_Static_assert({}, \"{h}\");\n", test.replace('T', h));
        }
        let file = out.join(format!("probe_{kind}.c"));
        std::fs::write(&file, src).expect("write the probe");
        let ok = Command::new(mpicc)
            .args(["-fsyntax-only", "-c"])
            .arg(&file)
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return kind;
        }
    }
    fail(
        mpicc,
        "its MPI handles are neither all pointers (Open MPI) nor all int (MPICH)",
    )
}

fn fail(mpicc: &str, why: &str) -> ! {
    panic!(
        "\n\nrcoll-mpi needs an MPI C compiler wrapper: {why}.\n\
         Install Open MPI's development files (Debian/Ubuntu: `apt-get install libopenmpi-dev`) \
         or point RCOLL_MPICC at another MPI's wrapper (RCOLL_MPICC=mpicc.mpich). \
         (Tried `{mpicc}`.)\n\
         rcoll-mpi is not a default member of the workspace: `cargo build` and rcoll-bench \
         never need it.\n"
    )
}
