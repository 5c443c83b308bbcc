pub mod generate;
pub mod pull;
pub mod speed;
