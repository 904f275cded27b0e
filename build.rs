//! Build script: with the `reference` feature, bake an rpath to libtorch into the binary so
//! `gaudi-fixes equiv` runs without LD_LIBRARY_PATH; always re-embed the catalogue when it changes.

fn main() {
    println!("cargo:rerun-if-changed=fixes");
    println!("cargo:rerun-if-changed=profiles");
    // torch-sys declares `links = "tch"` and prints `cargo:libtorch_lib=<dir>`, which cargo hands
    // to direct dependents as DEP_TCH_LIBTORCH_LIB.
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        // libtorch_cpu.so needs libcudart/libcupti from the NVIDIA wheels beside torch.
        let nvidia = std::path::Path::new(&dir).join("../../nvidia");
        if let Ok(entries) = std::fs::read_dir(&nvidia) {
            for entry in entries.flatten() {
                let lib = entry.path().join("lib");
                if lib.is_dir() {
                    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
                }
            }
        }
    }
}
