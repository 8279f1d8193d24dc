//! Links `c_abi_args` against librcoll.so as a C program would: ci/fuzz.sh builds the C
//! library with the fuzz targets' instrumentation into fuzz/target-capi first.
fn main() {
    let triple = std::env::var("TARGET").expect("TARGET");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target-capi")
        .join(triple)
        .join("release");
    println!("cargo:rerun-if-changed={}", dir.join("librcoll.so").display());
    if !dir.join("librcoll.so").exists() {
        println!(
            "cargo:warning=no {}/librcoll.so: c_abi_args will not link (ci/fuzz.sh builds it)",
            dir.display()
        );
    }
    let dir = dir.display();
    println!("cargo:rustc-link-arg-bin=c_abi_args=-L{dir}");
    println!("cargo:rustc-link-arg-bin=c_abi_args=-lrcoll");
    println!("cargo:rustc-link-arg-bin=c_abi_args=-Wl,-rpath,{dir}");
}
