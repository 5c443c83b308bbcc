//! `inferd bench`: the fleet benchmark client (drives any OpenAI-compatible server).

use anyhow::{bail, Result};

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_a: Args) -> Result<()> {
    bail!("bench: under construction")
}
