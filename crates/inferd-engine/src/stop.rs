//! Stop strings over streamed text.
//!
//! Text arrives in pieces that split anywhere relative to a stop string. The matcher
//! emits text as early as possible but holds back the longest tail that could still
//! become the start of a stop string; when a stop string completes, the text before
//! it is released and the rest (the stop string and anything after) is dropped.

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopStep {
    /// Text that can be shown now (possibly empty).
    Emit(String),
    /// A stop string matched: the final text to show before it.
    Stopped(String),
}

#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text withheld because it might begin a stop string.
    held: String,
    /// The stop string that ended the text, once one has.
    matched: Option<String>,
}

impl StopMatcher {
    /// Empty strings are ignored (they would match everywhere).
    pub fn new(stops: &[String]) -> Self {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
            matched: None,
        }
    }

    pub fn push(&mut self, text: &str) -> StopStep {
        if self.stops.is_empty() {
            return StopStep::Emit(text.to_string());
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.push_str(text);
        // Earliest match wins; among matches at one position, any (they end the text there).
        let first = self
            .stops
            .iter()
            .filter_map(|s| buf.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at);
        if let Some((at, s)) = first {
            self.matched = Some(s.clone());
            buf.truncate(at);
            return StopStep::Stopped(buf);
        }
        let keep = self.partial_tail(&buf);
        self.held = buf.split_off(buf.len() - keep);
        StopStep::Emit(buf)
    }

    /// The stop string that matched, if one did.
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    /// Releases the withheld text (generation ended for another reason).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length in bytes of the longest suffix of `buf` that is a proper prefix of a stop string.
    fn partial_tail(&self, buf: &str) -> usize {
        let mut best = 0;
        for s in &self.stops {
            let max = (s.len() - 1).min(buf.len());
            for n in (best + 1..=max).rev() {
                let start = buf.len() - n;
                if buf.is_char_boundary(start) && s.starts_with(&buf[start..]) {
                    best = n;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopStep::Emit(t) => out.push_str(&t),
                StopStep::Stopped(t) => {
                    out.push_str(&t);
                    return (out, true);
                }
            }
        }
        out.push_str(&m.flush());
        (out, false)
    }

    #[test]
    fn stop_split_across_pieces_is_not_emitted() {
        assert_eq!(
            run(&["END"], &["abc E", "N", "D tail"]),
            ("abc ".into(), true)
        );
        assert_eq!(run(&["\n\n"], &["a\n", "\nb"]), ("a".into(), true));
    }

    #[test]
    fn false_start_is_released() {
        assert_eq!(run(&["END"], &["x EN", "o"]), ("x ENo".into(), false));
        assert_eq!(run(&["END"], &["x EN"]), ("x EN".into(), false));
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        assert_eq!(run(&["cd", "b"], &["abcd"]), ("a".into(), true));
        assert_eq!(run(&["xyz", "yq"], &["axy", "q"]), ("ax".into(), true));
        let mut m = StopMatcher::new(&["cd".to_string(), "b".to_string()]);
        assert_eq!(m.matched(), None);
        m.push("abcd");
        assert_eq!(m.matched(), Some("b"));
    }

    #[test]
    fn text_is_streamed_as_early_as_possible() {
        let mut m = StopMatcher::new(&["STOP".to_string()]);
        assert_eq!(m.push("hello S"), StopStep::Emit("hello ".into()));
        assert_eq!(m.push("T"), StopStep::Emit(String::new()));
        assert_eq!(m.push("x"), StopStep::Emit("STx".into()));
    }

    #[test]
    fn multibyte_text_keeps_char_boundaries() {
        assert_eq!(run(&["é!"], &["café", "!"]), ("caf".into(), true));
        assert_eq!(run(&["日本"], &["今日", "は"]), ("今日は".into(), false));
        assert_eq!(run(&[""], &["a"]), ("a".into(), false));
    }
}
