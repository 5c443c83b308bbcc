//! Warnings for the caller to log (corrupt files removed, IO problems), bounded
//! so that a caller that never collects them does not grow memory without end.

/// Most warnings kept between two `take` calls; later ones are counted only.
const MAX_KEPT: usize = 1000;

#[derive(Debug, Default)]
pub(crate) struct Warnings {
    kept: Vec<String>,
    dropped: usize,
}

impl Warnings {
    /// Records a warning.
    pub(crate) fn push(&mut self, msg: String) {
        if self.kept.len() < MAX_KEPT {
            self.kept.push(msg);
        } else {
            self.dropped += 1;
        }
    }

    /// The warnings since the last call, plus a note of any that were dropped.
    pub(crate) fn take(&mut self) -> Vec<String> {
        let mut out = std::mem::take(&mut self.kept);
        if self.dropped > 0 {
            out.push(format!("{} more warnings not kept", self.dropped));
            self.dropped = 0;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_drained() {
        let mut w = Warnings::default();
        for i in 0..MAX_KEPT + 5 {
            w.push(i.to_string());
        }
        let got = w.take();
        assert_eq!(got.len(), MAX_KEPT + 1);
        assert_eq!(got.last().unwrap(), "5 more warnings not kept");
        assert!(w.take().is_empty());
    }
}
