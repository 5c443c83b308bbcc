pub mod bench;
pub mod daemon;
pub mod generate;
pub mod instance;
pub mod pull;
pub mod serve;
pub mod speed;

/// A `usize` flag within `range` (clap names the flag and the range it takes).
pub(crate) fn sizes(
    range: std::ops::RangeInclusive<u64>,
) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(range)
}
