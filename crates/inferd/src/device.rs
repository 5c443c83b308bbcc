//! `--device`: which backend runs the model. `auto` takes the first GPU when this binary
//! was built with CUDA (feature `cuda`) and the machine has a usable one, else the CPU.

use anyhow::{bail, Result};

/// A resolved choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// CUDA device ordinal.
    Cuda(usize),
}

/// Parses `cpu`, `cuda`, `cuda:N` or `auto`, resolving `auto` on this machine.
pub fn resolve(s: &str) -> Result<Device> {
    let s = s.trim().to_ascii_lowercase();
    match s.as_str() {
        "cpu" => Ok(Device::Cpu),
        "auto" => Ok(auto()),
        _ => {
            let Some(rest) = s.strip_prefix("cuda") else {
                bail!("--device `{s}`: expected cpu, cuda, cuda:N or auto");
            };
            let n = match rest.strip_prefix(':') {
                Some(n) => n
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--device `{s}`: N in cuda:N is a number"))?,
                None if rest.is_empty() => 0,
                None => bail!("--device `{s}`: expected cpu, cuda, cuda:N or auto"),
            };
            check_cuda(n)?;
            Ok(Device::Cuda(n))
        }
    }
}

#[cfg(feature = "cuda")]
fn auto() -> Device {
    match inferd_runtime::backend::cuda::device_count() {
        Ok(n) if n > 0 => Device::Cuda(0),
        _ => Device::Cpu,
    }
}

#[cfg(not(feature = "cuda"))]
fn auto() -> Device {
    Device::Cpu
}

#[cfg(feature = "cuda")]
fn check_cuda(n: usize) -> Result<()> {
    let count = inferd_runtime::backend::cuda::device_count()?;
    if n >= count {
        bail!("--device cuda:{n}: this machine has {count} CUDA device(s)");
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn check_cuda(_: usize) -> Result<()> {
    bail!("this inferd was built without CUDA: rebuild with `cargo build --release --features cuda` (see README)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_choices() {
        assert_eq!(resolve("cpu").unwrap(), Device::Cpu);
        assert_eq!(resolve(" CPU ").unwrap(), Device::Cpu);
        assert!(resolve("gpu").is_err());
        assert!(resolve("cuda:x").is_err());
        assert!(resolve("cudax").is_err());
        // Without a GPU here, `auto` is the CPU and `cuda` is a clear error.
        assert_eq!(resolve("auto").unwrap(), Device::Cpu);
        assert!(resolve("cuda:0").is_err());
    }
}
