//! A call being read: its raw text (for the fallback to content), the reader, and
//! whether it has been announced.

use super::Out;
use crate::call::{CallReader, Step};

/// A call in progress.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    /// Everything held for this call so far (marker and whitespace before it included):
    /// the content to emit if it is not a call after all.
    raw: String,
    reader: CallReader,
    /// Set once announced.
    index: Option<usize>,
}

impl Pending {
    /// A call whose held text so far is `raw`.
    pub(crate) fn new(raw: String) -> Pending {
        Pending {
            raw,
            reader: CallReader::new(),
            index: None,
        }
    }

    /// Feeds one character: announces the call once it is ready and passes on new
    /// arguments text. On [`Step::Fail`] the character was not consumed.
    pub(crate) fn push(&mut self, c: char, out: &mut Out) -> Step {
        let step = self.reader.push(c);
        if step == Step::Fail {
            return step;
        }
        self.raw.push(c);
        if self.index.is_none() && self.reader.ready() {
            let name = self.reader.name().unwrap_or_default();
            self.index = Some(out.start(name));
        }
        if let Some(i) = self.index {
            let args = self.reader.new_args();
            out.args(i, args);
            args.clear();
        }
        step
    }

    /// Not a call after all: its text becomes content (after its announcement, if it
    /// had one; that cannot be taken back).
    pub(crate) fn fail(self, out: &mut Out) {
        out.content(&self.raw);
    }

    /// The reply ended inside this call (`max_tokens`, a stop string). Announced, it
    /// stays a call, cut short with the arguments streamed so far (`out` notes the cut);
    /// never announced, its text is content.
    pub(crate) fn cut(self, out: &mut Out) {
        if self.index.is_some() {
            out.cut = true;
        } else {
            out.content(&self.raw);
        }
    }
}
