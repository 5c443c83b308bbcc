//! With feature `cuda`: compiles `kernels/*.cu` with nvcc into one static library and
//! links it with the static CUDA runtime. Compiled kernels are cached by a SHA-256 of
//! their sources, the flags and nvcc's version (`INFERD_KERNEL_CACHE`, default
//! `~/.cache/inferd/kernels`), so rebuilds and CI compile them once.
//!
//! nvcc is `INFERD_NVCC`, else the workspace's `.cuda/nvidia/cu13/bin/nvcc` (installed
//! from PyPI by `scripts/cuda-toolchain.sh`), else `nvcc` on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Hopper (H100/H200); `sm_90a` enables wgmma and setmaxnreg.
const FLAGS: &[&str] = &[
    "-std=c++17",
    "-O3",
    "-gencode=arch=compute_90a,code=sm_90a",
    "--expt-relaxed-constexpr",
    "-lineinfo",
    "-Xcompiler",
    "-fPIC",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    for v in ["INFERD_NVCC", "INFERD_KERNEL_CACHE", "HOME"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let nvcc = find_nvcc(&manifest);
    let version = run_capture(Command::new(&nvcc).arg("--version"))
        .unwrap_or_else(|e| fail(&format!("cannot run nvcc ({}): {e}", nvcc.display())));

    let kernels = manifest.join("kernels");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&kernels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    sources.sort();

    let mut h = Sha256::new();
    h.update(version.as_bytes());
    for f in FLAGS {
        h.update(f.as_bytes());
        h.update([0]);
    }
    for s in &sources {
        h.update(s.file_name().unwrap().as_encoded_bytes());
        h.update([0]);
        h.update(std::fs::read(s).unwrap());
    }
    let hash: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();

    let cache = cache_dir().join(&hash[..24]);
    let lib = cache.join("libinferd_kernels.a");
    if !lib.exists() {
        build_library(&nvcc, &sources, &cache, &lib);
    }
    println!("cargo:rustc-link-search=native={}", cache.display());
    println!("cargo:rustc-link-lib=static=inferd_kernels");
    // The CUDA runtime beside nvcc (the PyPI layout: bin/ and lib/ under one root).
    let root = nvcc.parent().and_then(Path::parent).unwrap();
    for dir in ["lib", "lib64", "targets/x86_64-linux/lib"] {
        let d = root.join(dir);
        if d.join("libcudart_static.a").exists() {
            println!("cargo:rustc-link-search=native={}", d.display());
        }
    }
    println!("cargo:rustc-link-lib=static=cudart_static");
    for l in ["stdc++", "dl", "rt", "pthread"] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
}

fn find_nvcc(manifest: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("INFERD_NVCC") {
        return PathBuf::from(p);
    }
    let local = manifest.join("../../.cuda/nvidia/cu13/bin/nvcc");
    if local.exists() {
        return local;
    }
    if Command::new("nvcc").arg("--version").output().is_ok() {
        return PathBuf::from("nvcc");
    }
    fail("feature `cuda` needs nvcc: run scripts/cuda-toolchain.sh (nvcc 13.0 from PyPI into .cuda/), or set INFERD_NVCC")
}

fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("INFERD_KERNEL_CACHE") {
        return PathBuf::from(p);
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache/inferd/kernels"),
        None => PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("kernels"),
    }
}

/// Compiles every `.cu` (in parallel) and archives the objects; the library appears in
/// the cache under its final name only once complete (written aside, then renamed).
fn build_library(nvcc: &Path, sources: &[PathBuf], cache: &Path, lib: &Path) {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("kernels");
    std::fs::create_dir_all(&out).unwrap();
    let units: Vec<&PathBuf> = sources
        .iter()
        .filter(|s| s.extension().is_some_and(|e| e == "cu"))
        .collect();
    let objects: Vec<PathBuf> = std::thread::scope(|scope| {
        let jobs: Vec<_> = units
            .iter()
            .map(|src| {
                let obj = out.join(src.file_stem().unwrap()).with_extension("o");
                scope.spawn(move || {
                    let mut c = Command::new(nvcc);
                    c.args(FLAGS).arg("-c").arg(src).arg("-o").arg(&obj);
                    if let Err(e) = run_capture(&mut c) {
                        fail(&format!("nvcc {}: {e}", src.display()));
                    }
                    obj
                })
            })
            .collect();
        jobs.into_iter().map(|j| j.join().unwrap()).collect()
    });
    std::fs::create_dir_all(cache).unwrap();
    let tmp = cache.join(format!("libinferd_kernels.a.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut ar = Command::new("ar");
    ar.arg("crs").arg(&tmp).args(&objects);
    if let Err(e) = run_capture(&mut ar) {
        fail(&format!("ar: {e}"));
    }
    std::fs::rename(&tmp, lib).unwrap();
}

fn run_capture(c: &mut Command) -> Result<String, String> {
    let o = c.output().map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}
