//! One agent's conversation: its private context, and how a turn's reply extends it.

use crate::calibrate::{calibrate, first_turn_messages, Calibration};
use crate::client::{Client, Message, Prompt, Reply};
use crate::corpus::{Corpus, AGENT_HEADER_WORDS};
use anyhow::Result;

/// Token ids used for `--token-prompts` (inside every supported vocabulary and clear of the
/// special tokens at either end of it).
pub const TOKEN_ID_RANGE: (u32, u32) = (1000, 30000);
/// Tokens of the user message appended after each reply in token-prompt mode.
const FOLLOW_UP_TOKENS: usize = 16;

/// How prompts are built and sized.
#[derive(Debug, Clone)]
pub enum PromptMode {
    /// Chat messages sized with a calibration of the server's tokens per word.
    Chat(Calibration),
    /// `/v1/completions` with token-id prompts (exact sizes, no calibration).
    Tokens,
}

impl PromptMode {
    /// Calibrates (chat) or not (token prompts).
    pub async fn prepare(client: &Client, corpus: &Corpus, token_prompts: bool) -> Result<Self> {
        if token_prompts {
            Ok(PromptMode::Tokens)
        } else {
            Ok(PromptMode::Chat(calibrate(client, corpus).await?))
        }
    }

    pub fn calibration(&self) -> Option<&Calibration> {
        match self {
            PromptMode::Chat(c) => Some(c),
            PromptMode::Tokens => None,
        }
    }
}

/// An agent's growing prompt.
#[derive(Debug, Clone)]
pub enum Conversation {
    Chat(Vec<Message>),
    Tokens(Vec<u32>),
}

impl Conversation {
    /// Agent `agent`'s turn-0 prompt of about `context_tokens` tokens (exactly, for token ids).
    pub fn new(corpus: &Corpus, agent: usize, context_tokens: usize, mode: &PromptMode) -> Self {
        match mode {
            PromptMode::Chat(cal) => {
                let words = cal
                    .words_for(context_tokens)
                    .saturating_sub(AGENT_HEADER_WORDS)
                    .max(1);
                Conversation::Chat(first_turn_messages(
                    agent,
                    corpus.agent_context(agent, words),
                ))
            }
            PromptMode::Tokens => {
                let (lo, hi) = TOKEN_ID_RANGE;
                Conversation::Tokens(corpus.token_ids(agent as u64, 0, context_tokens, lo, hi))
            }
        }
    }

    /// Ends the last message, when it is the user's, with `text` on a line of its own (e.g.
    /// [`crate::structured::instruction`]). Token prompts have no messages: nothing changes.
    pub fn append_to_user_turn(&mut self, text: &str) {
        if let Conversation::Chat(m) = self {
            if let Some(last) = m.last_mut().filter(|l| l.role == "user") {
                last.content.push('\n');
                last.content.push_str(text);
            }
        }
    }

    pub fn prompt(&self) -> Prompt {
        match self {
            Conversation::Chat(m) => Prompt::Chat(m.clone()),
            Conversation::Tokens(t) => Prompt::Tokens(t.clone()),
        }
    }

    /// Appends turn `turn`'s reply and the next user message. In token mode the reply's ids
    /// where the server returned them, else as many fresh ids stand in for it.
    pub fn advance(&mut self, corpus: &Corpus, agent: usize, turn: usize, reply: &Reply) {
        match self {
            Conversation::Chat(m) => {
                if !reply.text.is_empty() {
                    m.push(Message::new("assistant", reply.text.clone()));
                }
                m.push(Message::new("user", corpus.follow_up(agent, turn)));
            }
            Conversation::Tokens(t) => {
                let (lo, hi) = TOKEN_ID_RANGE;
                let n = reply.record.completion_tokens as usize;
                let part = 2 * (turn as u64 + 1);
                match &reply.token_ids {
                    Some(ids) => t.extend(ids),
                    None => t.extend(corpus.token_ids(agent as u64, part, n, lo, hi)),
                }
                t.extend(corpus.token_ids(agent as u64, part + 1, FOLLOW_UP_TOKENS, lo, hi));
            }
        }
    }
}
