//! `inferd serve`: the OpenAI-compatible server in the foreground.

use anyhow::{bail, Result};

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_a: Args) -> Result<()> {
    bail!("serve: under construction")
}
