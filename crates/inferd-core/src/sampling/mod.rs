//! Token sampling: from one position's raw logits to one chosen token.
//!
//! Pipeline of [`Sampler::sample`], in order:
//! 1. copy into scratch and apply the penalties ([`penalties`]): repetition (HF, over
//!    prompt + generated), then presence and frequency (OpenAI, over generated),
//! 2. sanitise (`NaN` → `-inf`, `+inf` → `f32::MAX`; a row of `-inf` becomes all 0),
//!    then DRY ([`dry`], over generated) with the logit bias folded into its entries,
//!    then the grammar mask (tokens a constraint does
//!    not allow get `-inf`),
//! 3. logprobs, if asked, from the penalised logits (before temperature and truncation),
//! 4. greedy argmax when `temperature == 0` or `top_k == 1`, otherwise temperature, then top-k,
//!    top-p and min-p truncation ([`truncate`]) and one draw from a seeded PRNG ([`rng`]).

mod canonical;
mod detexp;
mod dry;
mod logprobs;
mod params;
mod penalties;
mod plan;
mod rng;
mod sampler;
mod truncate;

pub use dry::{Dry, DryEntry};
pub use params::{SamplingError, SamplingParams, MAX_DRY_BREAKERS, MAX_LOGIT_BIAS, MAX_LOGPROBS};
pub use penalties::{Penalties, PenaltyEntry};
pub use plan::{DeviceDraw, DrawPlan, PlanEntries};
pub use rng::Xoshiro256;
pub use sampler::{Extra, Sampled, Sampler};
