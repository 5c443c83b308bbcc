//! Helpers shared by the parser tests.
#![allow(dead_code)]

use inferd_tools::{CallIds, Parsed, StreamEvent, ToolStream, ToolSyntax};

/// The id seed both parsers get, so their ids can be compared too.
pub const SEED: u64 = 7;

/// Merges adjacent content pieces and adjacent argument pieces of one call.
pub fn merge(events: impl IntoIterator<Item = StreamEvent>) -> Vec<StreamEvent> {
    let mut out: Vec<StreamEvent> = Vec::new();
    for e in events {
        match (out.last_mut(), e) {
            (Some(StreamEvent::Content(a)), StreamEvent::Content(b)) => a.push_str(&b),
            (
                Some(StreamEvent::CallArgs { index: i, fragment }),
                StreamEvent::CallArgs { index, fragment: f },
            ) if *i == index => fragment.push_str(&f),
            (_, e) => out.push(e),
        }
    }
    out
}

/// Streams `pieces` through a seeded stream; all events, merged.
pub fn stream(syntax: ToolSyntax, pieces: &[&str]) -> Vec<StreamEvent> {
    let mut s = ToolStream::with_ids(syntax, CallIds::seeded(SEED));
    let mut all = Vec::new();
    for p in pieces {
        let events = s.push(p);
        for e in &events {
            match e {
                StreamEvent::Content(t) => assert!(!t.is_empty(), "empty content event"),
                StreamEvent::CallArgs { fragment, .. } => {
                    assert!(!fragment.is_empty(), "empty arguments event")
                }
                StreamEvent::CallStart { .. } => {}
            }
        }
        all.extend(events);
    }
    all.extend(s.finish());
    merge(all)
}

/// The complete parse with the seeded ids.
pub fn complete(syntax: ToolSyntax, text: &str) -> Parsed {
    inferd_tools::parse_with_ids(syntax, text, &mut CallIds::seeded(SEED))
}

/// Merged stream events folded into a `Parsed` (content concatenated, calls in order),
/// checking that call indices count up from 0.
pub fn fold(events: &[StreamEvent]) -> Parsed {
    let mut started = 0;
    for e in events {
        match e {
            StreamEvent::CallStart { index, .. } => {
                assert_eq!(*index, started, "indices count up from 0");
                started += 1;
            }
            StreamEvent::CallArgs { index, .. } => assert!(*index < started, "{e:?}"),
            StreamEvent::Content(_) => {}
        }
    }
    Parsed::from_events(events.iter().cloned())
}

/// Byte offsets of every character boundary inside `text`.
pub fn boundaries(text: &str) -> Vec<usize> {
    (1..text.len())
        .filter(|&i| text.is_char_boundary(i))
        .collect()
}

/// A small deterministic generator for random splits.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// `text` cut at the given sorted byte offsets.
pub fn cut<'a>(text: &'a str, at: &[usize]) -> Vec<&'a str> {
    let mut pieces = Vec::new();
    let mut last = 0;
    for &i in at {
        pieces.push(&text[last..i]);
        last = i;
    }
    pieces.push(&text[last..]);
    pieces
}

/// Checks that every split of `text` streams to the same merged events, and that they
/// fold to the complete parse (ids included). Returns the complete parse.
pub fn check_all_splits(syntax: ToolSyntax, text: &str) -> Parsed {
    let want = complete(syntax, text);
    let whole = stream(syntax, &[text]);
    assert_eq!(
        fold(&whole),
        want,
        "stream of the whole text vs parse: {text:?}"
    );
    let b = boundaries(text);
    // Every single split point.
    for &i in &b {
        assert_eq!(
            stream(syntax, &cut(text, &[i])),
            whole,
            "split at {i}: {text:?}"
        );
    }
    // Every pair of split points for short texts.
    if b.len() <= 80 {
        for (x, &i) in b.iter().enumerate() {
            for &j in &b[x + 1..] {
                assert_eq!(
                    stream(syntax, &cut(text, &[i, j])),
                    whole,
                    "split at {i},{j}: {text:?}"
                );
            }
        }
    }
    // One character at a time.
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(stream(syntax, &chars), whole, "char by char: {text:?}");
    // Random splits, empty pieces included.
    let mut rng = Lcg(text.len() as u64 + 1);
    for _ in 0..200 {
        let mut at: Vec<usize> = (0..rng.below(8) + 1)
            .filter_map(|_| b.get(rng.below(b.len())).copied())
            .collect();
        at.sort_unstable();
        assert_eq!(
            stream(syntax, &cut(text, &at)),
            whole,
            "split at {at:?}: {text:?}"
        );
    }
    want
}

/// Arguments must be what serde_json writes for the object the model wrote.
pub fn assert_serde_form(arguments: &str, model_wrote: &str) {
    let v: serde_json::Value = serde_json::from_str(model_wrote).unwrap();
    assert_eq!(arguments, serde_json::to_string(&v).unwrap());
}
