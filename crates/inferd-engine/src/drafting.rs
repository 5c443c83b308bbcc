//! Where a step's drafts come from when the engine has a draft model: a sequence's copy
//! draft when it is as long as the sequence may draft (it costs nothing), else the draft
//! model's guesses ([`crate::draft::DraftModel`]), asked as the sequence's back-off allows.

use inferd_core::kv::SeqId;
use inferd_runtime::{Backend, RuntimeError};
use inferd_text::Tokenizer;

use crate::draft::DraftRequest;
use crate::engine::Engine;

impl<B: Backend> Engine<B> {
    /// This step's drafts with a draft model: a sequence whose copy draft is as long as
    /// it may be takes it (it costs nothing), the others the draft model's, unless their
    /// back-off says to wait (`Seq::model_backoff`: the model's guesses kept missing), or
    /// prompt work waits (a prompt or a recompute not yet read): the device is busy with
    /// it, and the draft's passes (its catch-up of new context first) would only delay
    /// those first tokens. A draft model that fails is dropped (copy drafts take over),
    /// with a warning.
    pub(crate) fn model_drafts(&mut self) {
        // The back-off's clock: steps so far.
        let now = self.stats().steps;
        let (Some(spec), Some(dm)) = (&self.speculate, &mut self.draft_model) else {
            return;
        };
        let seqs = &mut self.seqs;
        dm.retain(|id| seqs.contains_key(&id));
        let prompt_work = seqs.values().any(|s| s.prompt_waits());
        let mut ids: Vec<SeqId> = seqs.keys().copied().collect();
        ids.sort_unstable();
        // The sequences that ask the model, and how many guesses each may take.
        let mut asking = Vec::new();
        for id in ids {
            let s = seqs.get_mut(&id).expect("listed above");
            let max = s.propose_draft(spec);
            // A shorter copy draft stays unless the model drafts.
            if max > 0 && s.draft.len() < max && !prompt_work && s.model_backoff.ask(now) {
                asking.push((id, max));
            }
        }
        let reqs: Vec<DraftRequest<'_>> = asking
            .iter()
            .map(|&(id, max)| {
                let s = &seqs[&id];
                DraftRequest {
                    seq: id,
                    tokens: &s.tokens,
                    prompt_len: s.prompt_len,
                    max,
                }
            })
            .collect();
        let proposed = dm.propose(&reqs);
        drop(reqs);
        match proposed {
            Ok(drafts) => {
                for ((id, _), d) in asking.into_iter().zip(drafts) {
                    let Some(seq) = seqs.get_mut(&id) else {
                        continue;
                    };
                    match d {
                        // No draft this step (catching up, no room): it asks again next.
                        None => {}
                        // Nothing it was sure of: as a miss.
                        Some(d) if d.is_empty() => seq.model_backoff.missed(),
                        Some(d) => seq.set_draft(d, true),
                    }
                }
            }
            Err(e) => {
                if self.note_fatal(&e) {
                    // The device is lost: the engine stops at its next turn.
                    return;
                }
                eprintln!(
                    "inferd: warning: the draft model failed ({e}); drafting by copies from now on"
                );
                self.draft_model = None;
            }
        }
    }
}

/// A draft model must speak the target's vocabulary: the same token for every id.
pub(crate) fn same_vocabulary(target: &Tokenizer, draft: &Tokenizer) -> Result<(), RuntimeError> {
    let n = target.vocab_size();
    if draft.vocab_size() != n {
        return Err(RuntimeError::Other(format!(
            "the draft model's vocabulary has {} tokens, the model's {n}: a draft model \
             must share the model's tokenizer",
            draft.vocab_size()
        )));
    }
    if let Some(id) = (0..n as u32).find(|&i| target.id_to_token(i) != draft.id_to_token(i)) {
        return Err(RuntimeError::Other(format!(
            "the draft model's token {id} is {:?}, the model's {:?}: a draft model must \
             share the model's tokenizer",
            draft.id_to_token(id).unwrap_or_default(),
            target.id_to_token(id).unwrap_or_default()
        )));
    }
    Ok(())
}
