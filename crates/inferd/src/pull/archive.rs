//! Reading one member out of a package archive: a zip (wheel) or a gzipped tar (sdist, npm).

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Whether archive entry `path` is `member` itself or ends with `/member`.
fn matches(path: &str, member: &str) -> bool {
    let path = path.trim_start_matches("./");
    path == member || (path.ends_with(member) && path[..path.len() - member.len()].ends_with('/'))
}

/// Streams `member` of the archive at `archive` into `out`; returns the bytes copied.
pub fn copy_member(archive: &Path, member: &str, out: &mut dyn Write) -> Result<u64> {
    let mut magic = [0u8; 4];
    let mut f = File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let n = f.read(&mut magic)?;
    let what = || format!("{member} in {}", archive.display());
    let copied = match &magic[..n.min(4)] {
        [b'P', b'K', 3, 4] => copy_from_zip(archive, member, out).with_context(what)?,
        [0x1f, 0x8b, ..] => copy_from_tar_gz(archive, member, out).with_context(what)?,
        _ => bail!("{} is neither a zip nor a gzipped tar", archive.display()),
    };
    copied.with_context(|| format!("{} has no member {member}", archive.display()))
}

fn copy_from_zip(archive: &Path, member: &str, out: &mut dyn Write) -> Result<Option<u64>> {
    let mut zip = zip::ZipArchive::new(BufReader::new(File::open(archive)?))?;
    let Some(name) = zip
        .file_names()
        .find(|n| matches(n, member))
        .map(str::to_owned)
    else {
        return Ok(None);
    };
    let mut entry = zip.by_name(&name)?;
    Ok(Some(std::io::copy(&mut entry, out)?))
}

fn copy_from_tar_gz(archive: &Path, member: &str, out: &mut dyn Write) -> Result<Option<u64>> {
    let gz = flate2::read::GzDecoder::new(BufReader::new(File::open(archive)?));
    let mut tar = tar::Archive::new(gz);
    for entry in tar.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        if entry.header().entry_type().is_file() && matches(&path, member) {
            return Ok(Some(std::io::copy(&mut entry, out)?));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_matching_is_by_whole_path_components() {
        assert!(matches("pkg/data/a.bin", "pkg/data/a.bin"));
        assert!(matches("pkg-1.0/pkg/data/a.bin", "pkg/data/a.bin"));
        assert!(matches("./package/x.json", "package/x.json"));
        assert!(!matches("mypkg/data/a.bin", "pkg/data/a.bin"));
        assert!(!matches("pkg/data/a.bin.orig", "pkg/data/a.bin"));
    }
}
