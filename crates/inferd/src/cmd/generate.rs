//! `inferd generate`: one prompt, streamed to stdout.

use std::io::Write;

use anyhow::{bail, Result};
use inferd_core::sampling::{Sampler, SamplingParams};
use inferd_runtime::generate::{generate, GenerateConfig};
use inferd_text::{ChatInput, IncrementalDecoder};

use crate::loaded::Loaded;
use crate::pull::DEFAULT_MODEL;

#[derive(clap::Args)]
pub struct Args {
    /// Built-in model name or a path (.gguf file, or a directory with config.json + safetensors).
    #[arg(long, short, default_value = DEFAULT_MODEL)]
    model: String,
    /// The prompt text.
    #[arg(long, short)]
    prompt: String,
    /// Wrap the prompt as a user message with the model's chat template.
    #[arg(long)]
    chat: bool,
    /// System message (with --chat).
    #[arg(long)]
    system: Option<String>,
    /// Maximum new tokens.
    #[arg(short = 'n', long, default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f32,
    #[arg(long)]
    seed: Option<u64>,
    /// Print timing to stderr at the end.
    #[arg(long)]
    stats: bool,
    /// Print the rendered prompt and its token ids to stderr.
    #[arg(long)]
    verbose: bool,
}

pub fn run(a: Args) -> Result<()> {
    let m = Loaded::open(&a.model)?;
    let text = if a.chat {
        let Some(tpl) = &m.template else {
            bail!("this model has no chat template; drop --chat")
        };
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(serde_json::json!({"role": "system", "content": s}));
        }
        msgs.push(serde_json::json!({"role": "user", "content": a.prompt}));
        let msgs = serde_json::Value::Array(msgs);
        tpl.render(&ChatInput {
            messages: &msgs,
            tools: None,
            add_generation_prompt: true,
            extra: Default::default(),
        })?
    } else {
        a.prompt.clone()
    };
    // A chat template writes its own special tokens; plain prompts get the tokenizer's (e.g. BOS).
    let prompt = m.tokenizer.encode(&text, !a.chat)?;
    if a.verbose {
        eprintln!("prompt text: {text:?}\nprompt ids: {prompt:?}");
    }
    let params = SamplingParams {
        temperature: a.temperature,
        top_p: a.top_p,
        top_k: a.top_k,
        min_p: a.min_p,
        repetition_penalty: a.repetition_penalty,
        seed: a.seed,
        ..Default::default()
    };
    params.validate()?;
    let mut sampler = Sampler::new(params);
    let cfg = GenerateConfig {
        max_new_tokens: a.max_tokens,
        stop_ids: m.tokenizer.stop_ids().to_vec(),
        ..Default::default()
    };
    let mut dec = IncrementalDecoder::new(&m.tokenizer, true);
    let mut stdout = std::io::stdout();
    let mut err = None;
    let out = generate(&m.model, &prompt, &mut sampler, &cfg, |t| {
        match dec.push(t) {
            Ok(s) => {
                let _ = stdout.write_all(s.as_bytes());
                let _ = stdout.flush();
                true
            }
            Err(e) => {
                err = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e.into());
    }
    let tail = dec.finish()?;
    println!("{tail}");
    if a.stats {
        let p = prompt.len() as f64 / out.prefill_time.as_secs_f64();
        let d = out.tokens.len() as f64 / out.decode_time.as_secs_f64();
        eprintln!(
            "prompt {} tokens ({p:.1} tok/s), generated {} tokens ({d:.1} tok/s), {}",
            prompt.len(),
            out.tokens.len(),
            if out.stopped {
                "stopped"
            } else {
                "length limit"
            }
        );
    }
    Ok(())
}
