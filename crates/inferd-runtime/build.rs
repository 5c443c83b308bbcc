//! With feature `cuda`: compiles `kernels/*.cu` with nvcc into one static library and
//! links it with the static CUDA runtime. Compiled kernels are cached by a SHA-256 of
//! their sources, the flags and nvcc's version (`INFERD_KERNEL_CACHE`, default
//! `~/.cache/inferd/kernels`), so rebuilds and CI compile them once. With feature
//! `kernel-probe` our own units are built with `IFD_KERNEL_PROBE` (their blocks' stage
//! stamps, `ifd::kprobe`: profiling only).
//!
//! nvcc is `INFERD_NVCC`, else the workspace's `.cuda/nvidia/cu13/bin/nvcc` (installed
//! from PyPI by `scripts/cuda-toolchain.sh`), else `nvcc` on `PATH`. The `fi_*.cu` units
//! instantiate FlashInfer's kernels from the headers of its pinned wheel, which the same
//! script unpacks into `.cuda/fi` (`INFERD_FLASHINFER` overrides: the wheel's
//! `flashinfer/data`), with curand's headers in `.cuda/curand`.

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

/// The FlashInfer wheel the `fi_*` units are built against (scripts/cuda-toolchain.sh).
const FLASHINFER_WHEEL_SHA256: &str =
    "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49";

/// FlashInfer's include directories inside the wheel's `flashinfer/data`, in order: its
/// CCCL before nvcc's own, then its headers and CUTLASS.
const FLASHINFER_INCLUDES: [&str; 6] = [
    "cccl/libcudacxx/include",
    "cccl/cub",
    "cccl/thrust",
    "include",
    "cutlass/include",
    "cutlass/tools/util/include",
];

/// Extra flags of the FlashInfer units.
fn flashinfer_flags(manifest: &Path) -> Vec<String> {
    let data = std::env::var_os("INFERD_FLASHINFER")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../.cuda/fi/flashinfer/data"));
    let curand = manifest.join("../../.cuda/curand/nvidia/cu13/include");
    if !data.join("include/flashinfer").is_dir() || !curand.is_dir() {
        fail("feature `cuda` needs FlashInfer's headers: run scripts/cuda-toolchain.sh");
    }
    let mut f = vec!["--expt-extended-lambda".to_string()];
    for d in FLASHINFER_INCLUDES {
        f.push(format!("-I{}", data.join(d).display()));
    }
    f.push(format!("-I{}", curand.display()));
    f
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    for v in [
        "INFERD_NVCC",
        "INFERD_KERNEL_CACHE",
        "INFERD_FLASHINFER",
        "HOME",
    ] {
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

    let fi_flags = flashinfer_flags(&manifest);
    // What every object depends on beside its sources (paths left out: a checkout
    // elsewhere reuses the cache).
    let common = format!(
        "{version}\n{FLASHINFER_WHEEL_SHA256}\n{}\n{}",
        FLAGS.join(" "),
        FLASHINFER_INCLUDES.join(" ")
    );
    // Our own units' extra flags (not FlashInfer's instantiations).
    let own_flags: Vec<String> = match std::env::var_os("CARGO_FEATURE_KERNEL_PROBE") {
        Some(_) => vec!["-DIFD_KERNEL_PROBE".to_string()],
        None => Vec::new(),
    };
    let lib_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("kernels");
    let flags = (&fi_flags[..], &own_flags[..]);
    build_library(&nvcc, &sources, flags, &common, &cache_dir(), &lib_dir);
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
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

/// Whether a unit is one of FlashInfer's instantiations (`fi_*`: FlashInfer's flags and
/// include paths).
fn is_fi_unit(p: &Path) -> bool {
    p.file_name().unwrap().to_string_lossy().starts_with("fi_")
}

/// Whether a unit instantiates FlashInfer (its own flags and headers).
fn is_flashinfer(p: &Path) -> bool {
    let n = p.file_name().unwrap().to_string_lossy();
    n.starts_with("fi_") || n.starts_with("flashinfer_")
}

/// Compiles every `.cu` that is not in the cache (one nvcc per core, the FlashInfer
/// prefill units (paged and ragged) first: they take minutes) and archives the objects into
/// `lib_dir/libinferd_kernels.a`. Each object is cached under a hash of its source, the
/// headers of its kind (FlashInfer's or ours), nvcc's version and the flags; a cached
/// object appears under its final name only once complete (written aside, then renamed).
/// `flags`: the FlashInfer instantiations' extra flags, then our own units'.
fn build_library(
    nvcc: &Path,
    sources: &[PathBuf],
    flags: (&[String], &[String]),
    common: &str,
    cache: &Path,
    lib_dir: &Path,
) {
    let objs = cache.join("objects");
    std::fs::create_dir_all(&objs).unwrap();
    std::fs::create_dir_all(lib_dir).unwrap();
    let headers: Vec<&PathBuf> = sources
        .iter()
        .filter(|s| s.extension().is_some_and(|e| e == "h" || e == "cuh"))
        .collect();
    // A unit's cached object: under a hash of what it is compiled from, read now.
    let object_of = |src: &PathBuf| -> PathBuf {
        let mut h = Sha256::new();
        h.update(common.as_bytes());
        if !is_fi_unit(src) {
            h.update(flags.1.join(" ").as_bytes());
        }
        for f in std::iter::once(src).chain(
            headers
                .iter()
                .copied()
                .filter(|x| is_flashinfer(x) == is_flashinfer(src)),
        ) {
            h.update(f.file_name().unwrap().as_encoded_bytes());
            h.update([0]);
            h.update(std::fs::read(f).unwrap());
        }
        let hash: String = h.finalize()[..12]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let stem = src.file_stem().unwrap().to_string_lossy();
        objs.join(format!("{stem}-{hash}.o"))
    };
    let mut units: Vec<(PathBuf, PathBuf)> = sources
        .iter()
        .filter(|s| s.extension().is_some_and(|e| e == "cu"))
        .map(|src| (src.clone(), object_of(src)))
        .collect();
    let cost = |p: &Path| {
        let n = p.file_name().unwrap().to_string_lossy();
        if n.starts_with("fi_prefill") || n.starts_with("fi_ragged") {
            0
        } else if is_flashinfer(p) {
            1
        } else {
            2
        }
    };
    units.sort_by_key(|(s, _)| cost(s));
    let todo: Vec<&(PathBuf, PathBuf)> = units.iter().filter(|(_, o)| !o.exists()).collect();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..cores.min(todo.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((src, obj)) = todo.get(i) else { break };
                // An edit of the unit or a header while nvcc ran would cache an object
                // under the hash of sources it was not compiled from (seen: a later build
                // of the old sources linked the new kernel, and crashed).
                compile(nvcc, src, flags, obj, || object_of(src) == *obj);
            });
        }
    });
    let lib = lib_dir.join("libinferd_kernels.a");
    let _ = std::fs::remove_file(&lib);
    let mut ar = Command::new("ar");
    ar.arg("crs").arg(&lib).args(units.iter().map(|(_, o)| o));
    if let Err(e) = run_capture(&mut ar) {
        fail(&format!("ar: {e}"));
    }
}

/// Compiles one unit into `obj` (written aside, then renamed: a crash leaves no partial
/// object under the cached name), provided `unchanged()` still holds once nvcc is done.
fn compile(
    nvcc: &Path,
    src: &Path,
    (fi_flags, own_flags): (&[String], &[String]),
    obj: &Path,
    unchanged: impl Fn() -> bool,
) {
    let tmp = obj.with_extension(format!("o.{}", std::process::id()));
    let mut c = Command::new(nvcc);
    c.args(FLAGS);
    if is_fi_unit(src) {
        c.args(fi_flags);
    } else {
        c.args(own_flags);
    }
    c.arg("-c").arg(src).arg("-o").arg(&tmp);
    if let Err(e) = run_capture(&mut c) {
        fail(&format!("nvcc {}: {e}", src.display()));
    }
    if !unchanged() {
        let _ = std::fs::remove_file(&tmp);
        fail(&format!(
            "{} or a header changed while nvcc compiled it: not cached; build again",
            src.display()
        ));
    }
    std::fs::rename(&tmp, obj).unwrap();
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
