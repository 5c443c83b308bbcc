//! A landed step's draws taken into their sequences: each token through the sequence's
//! checks (end of sequence, grammar, limits, a client gone) and out to the output thread;
//! a speculative decode's draws in order while each follows a draft token the model drew
//! too, then the scheduler and the runner told how many were kept.

use inferd_core::kv::SeqId;
use inferd_core::sampling::Sampled;
use inferd_runtime::Backend;

use crate::engine::Engine;
use crate::output::{OutMsg, TokenMsg};
use crate::seq::Verdict;
use crate::stats::names;

/// What a step's draws came to.
#[derive(Default)]
pub(crate) struct Landing {
    /// Tokens kept (drawn and accepted into their sequences).
    pub generated: u64,
    /// Sequences that ended (their record goes after the tokens are out).
    pub finished: Vec<SeqId>,
    /// Of those, requests answered to the end (not a client gone).
    pub completed: u64,
    /// Sequences whose client is gone (see `Engine::gone`).
    pub gone: Vec<SeqId>,
    /// The kept tokens, for the output thread, in order.
    pub tokens: Vec<TokenMsg>,
    /// Draft tokens the model checked, and those it drew too.
    pub drafted: u64,
    pub accepted: u64,
    /// Of those, the draft model's.
    pub model_drafted: u64,
    pub model_accepted: u64,
}

impl<B: Backend> Engine<B> {
    /// Takes `draws`, sequence `id`'s draws of the step (one, or one per position of a
    /// speculative decode), into its record, as far as they go (the rest are dropped).
    pub(crate) fn take_draws(
        &mut self,
        id: SeqId,
        draws: impl Iterator<Item = Sampled>,
        l: &mut Landing,
    ) {
        let Some(seq) = self.seqs.get_mut(&id) else {
            return;
        };
        let usable = seq.usable_draws();
        let draft = std::mem::take(&mut seq.draft);
        seq.draft_masks.clear();
        // Draws kept: they are the record's last tokens.
        let mut kept = 0;
        let mut going = true;
        for (i, s) in draws.enumerate() {
            let last = s.token;
            kept += 1;
            let mut end = None;
            let verdict = seq.accept(s.token);
            going = matches!(verdict, Verdict::Continue);
            match verdict {
                Verdict::Continue => {}
                Verdict::End(e) => {
                    end = Some(e);
                    if let Some(turn) = seq.ended_turn() {
                        self.ended_turns.insert(id, turn);
                    }
                    l.finished.push(id);
                    l.completed += 1;
                    metrics::counter!(names::REQUESTS_FINISHED).increment(1);
                }
                Verdict::Failed(msg) => {
                    self.output.send(OutMsg::Error(id, msg));
                    l.finished.push(id);
                    l.completed += 1;
                    metrics::counter!(names::REQUESTS_FINISHED).increment(1);
                    break;
                }
                Verdict::Disconnected => l.gone.push(id),
            }
            l.generated += 1;
            l.tokens.push(TokenMsg {
                id,
                sampled: s,
                end,
                cached: seq.cached,
            });
            // The model drew something else than the draft token here (or the grammar
            // could not go on past it): the rest is off.
            if !going || i + 1 >= usable || draft.get(i) != Some(&last) {
                break;
            }
        }
        if draft.is_empty() {
            return;
        }
        let accepted = kept - 1;
        l.drafted += draft.len() as u64;
        l.accepted += accepted as u64;
        if seq.draft_by_model {
            l.model_drafted += draft.len() as u64;
            l.model_accepted += accepted as u64;
        }
        if let Some(spec) = &self.speculate {
            seq.draft_taken(spec, draft.len(), accepted);
        }
        // The accepted drafts' KV is computed, also for a reply that ends here (its
        // session parks it, and its full blocks join the prefix cache now: no later
        // step registers them).
        self.sched.accept_drafts(&mut self.seqs, id, accepted);
        if going {
            let tokens = &self.seqs[&id].tokens;
            self.runner.settle(id, &tokens[tokens.len() - kept..]);
        } else if let Some(seq) = self.seqs.get(&id).filter(|s| !s.no_trace) {
            self.kvm
                .register(id, &seq.tokens[..seq.sched.num_computed()]);
        }
    }
}
