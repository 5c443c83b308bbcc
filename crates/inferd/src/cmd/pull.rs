//! `inferd pull`: fetch built-in models into the cache.

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Model names (see --list). Default: the default model.
    names: Vec<String>,
    /// List the built-in models.
    #[arg(long)]
    list: bool,
}

pub fn run(a: Args) -> Result<()> {
    if a.list {
        for e in crate::pull::registry() {
            println!("{:32} {}", e.name, e.description);
        }
        return Ok(());
    }
    let names = if a.names.is_empty() {
        vec![crate::pull::DEFAULT_MODEL.to_string()]
    } else {
        a.names
    };
    for n in names {
        let p = crate::pull::pull(&n)?;
        println!("{n}: {}", p.display());
    }
    Ok(())
}
