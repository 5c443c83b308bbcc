pub mod bench;
pub mod daemon;
pub mod generate;
pub mod pull;
pub mod serve;
pub mod speed;
