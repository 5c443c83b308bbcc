//! How many bytes a schema can force in a row.
//!
//! Where a grammar leaves only one way on, llguidance forces those bytes: each mask walks
//! and tokenizes the whole forced run ahead, so a mask costs time linear in it (a pattern
//! `^0{4096}$` about 3 ms a mask, `^0{100000}$` about 80 ms, measured on SmolLM2's
//! vocabulary), and one such reply holds up every sequence in the step. The sources a
//! schema controls are bounded before compiling ([`crate::limits`]): a pattern's
//! repetitions of a fixed string (counted here), and the text of `const` and `enum`
//! values and of property names.

use regex_syntax::hir::{Class, Hir, HirKind};

/// The longest run of bytes a match of `pattern` must contain in a row, or `None` when
/// the pattern does not parse (llguidance reports that).
pub fn pattern_run(pattern: &str) -> Option<u64> {
    let hir = regex_syntax::ParserBuilder::new()
        .nest_limit(64)
        .build()
        .parse(pattern)
        .ok()?;
    Some(run(&hir).longest)
}

/// What one regex node forces.
struct Run {
    /// Its length when it matches exactly one string (of any length), else `None`.
    whole: Option<u64>,
    /// The longest run of fixed bytes anywhere inside it.
    longest: u64,
}

fn run(h: &Hir) -> Run {
    let fixed = |n: u64| Run {
        whole: Some(n),
        longest: n,
    };
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => fixed(0),
        HirKind::Literal(l) => fixed(l.0.len() as u64),
        HirKind::Class(Class::Unicode(c)) => match c.ranges() {
            [r] if r.start() == r.end() => fixed(r.start().len_utf8() as u64),
            _ => Run {
                whole: None,
                longest: 0,
            },
        },
        HirKind::Class(Class::Bytes(c)) => match c.ranges() {
            [r] if r.start() == r.end() => fixed(1),
            _ => Run {
                whole: None,
                longest: 0,
            },
        },
        HirKind::Capture(c) => run(&c.sub),
        HirKind::Repetition(r) => {
            let sub = run(&r.sub);
            match sub.whole {
                // Its first `min` copies are forced; after them the rest is optional.
                Some(n) => {
                    let forced = n.saturating_mul(u64::from(r.min));
                    Run {
                        whole: (r.max == Some(r.min)).then_some(forced),
                        longest: forced.max(sub.longest),
                    }
                }
                None => Run {
                    whole: None,
                    longest: sub.longest,
                },
            }
        }
        HirKind::Concat(parts) => {
            let (mut current, mut longest, mut whole) = (0u64, 0u64, true);
            for p in parts {
                let r = run(p);
                longest = longest.max(r.longest);
                match r.whole {
                    Some(n) => {
                        current = current.saturating_add(n);
                        longest = longest.max(current);
                    }
                    None => {
                        whole = false;
                        current = 0;
                    }
                }
            }
            Run {
                whole: whole.then_some(current),
                longest,
            }
        }
        HirKind::Alternation(alts) => Run {
            whole: None,
            longest: alts.iter().map(|a| run(a).longest).max().unwrap_or(0),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_fixed_text_are_counted_through_repetitions() {
        for (p, n) in [
            ("^[a-z]{1,100000}$", 0),
            // Once begun, an optional piece's own run is forced.
            ("^a{0,100000}$", 1),
            ("^(x{5000})?$", 5000),
            ("^[ab]{100000}$", 0),
            ("^\\d{4}-\\d{2}-\\d{2}$", 1),
            ("^abc$", 3),
            ("^0{4096}$", 4096),
            ("^x0{4096}y$", 4098),
            ("^a{1000,2000}$", 1000),
            ("^((ab){100}c){100}$", 20_100),
            ("^(a{600}b?){3}$", 600),
            ("^(foo|bar){1000}$", 3),
            ("é{10}", 20),
        ] {
            assert_eq!(pattern_run(p), Some(n), "{p}");
        }
        assert_eq!(pattern_run("(unclosed"), None);
        // Nested counts multiply.
        assert_eq!(
            pattern_run("^((a{1000}){1000}){1000}$"),
            Some(1_000_000_000)
        );
    }
}
