pub mod bench;
pub mod daemon;
pub mod generate;
pub mod instance;
pub mod pull;
pub mod serve;
pub mod speed;
