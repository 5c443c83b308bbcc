//! How many bytes a schema can force in a row.
//!
//! Where a grammar leaves only one way on, llguidance forces those bytes: each mask walks
//! and tokenizes the whole forced run ahead, so a mask costs time linear in it (a pattern
//! `^0{4096}$` about 3 ms a mask, `^0{100000}$` about 80 ms, measured on SmolLM2's
//! vocabulary), and one such reply holds up every sequence in the step. The sources a
//! schema controls are bounded before compiling ([`crate::limits`]): a pattern's
//! repetitions of fixed text (counted here, through groups, repeats and alternatives),
//! and the text of `const` and `enum` values and of property names.

use regex_syntax::hir::{Class, Hir, HirKind};

/// The longest run of bytes a match of `pattern` must contain in a row once it has begun,
/// or `None` when the pattern does not parse (llguidance's regex engine, which parses
/// with the same crate and limits, refuses it too).
pub fn pattern_run(pattern: &str) -> Option<u64> {
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    Some(run(&hir).longest)
}

/// What one regex node forces.
#[derive(Clone, Copy)]
struct Run {
    /// Its length when it matches exactly one string, else `None`.
    whole: Option<u64>,
    /// Fixed bytes it starts with once entered, and ends with (which join the runs of
    /// the nodes around it).
    prefix: u64,
    suffix: u64,
    /// The longest run of fixed bytes anywhere inside it.
    longest: u64,
}

impl Run {
    fn fixed(n: u64) -> Run {
        Run {
            whole: Some(n),
            prefix: n,
            suffix: n,
            longest: n,
        }
    }

    const FREE: Run = Run {
        whole: None,
        prefix: 0,
        suffix: 0,
        longest: 0,
    };
}

fn run(h: &Hir) -> Run {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => Run::fixed(0),
        HirKind::Literal(l) => Run::fixed(l.0.len() as u64),
        HirKind::Class(Class::Unicode(c)) => match c.ranges() {
            [r] if r.start() == r.end() => Run::fixed(r.start().len_utf8() as u64),
            _ => Run::FREE,
        },
        HirKind::Class(Class::Bytes(c)) => match c.ranges() {
            [r] if r.start() == r.end() => Run::fixed(1),
            _ => Run::FREE,
        },
        HirKind::Capture(c) => run(&c.sub),
        HirKind::Repetition(r) => {
            let sub = run(&r.sub);
            let (min, exact) = (u64::from(r.min), r.max == Some(r.min));
            match sub.whole {
                // Its first `min` copies are forced; after them the rest is optional.
                Some(n) => {
                    let forced = n.saturating_mul(min);
                    Run {
                        whole: exact.then_some(forced),
                        prefix: forced,
                        suffix: if exact { forced } else { 0 },
                        longest: forced.max(sub.longest),
                    }
                }
                // Between two mandatory copies a copy's end joins the next one's start.
                None => Run {
                    whole: None,
                    prefix: if min >= 1 { sub.prefix } else { 0 },
                    suffix: if min >= 1 && exact { sub.suffix } else { 0 },
                    longest: if min >= 2 {
                        sub.longest.max(sub.suffix.saturating_add(sub.prefix))
                    } else {
                        sub.longest
                    },
                },
            }
        }
        HirKind::Concat(parts) => {
            let (mut current, mut longest, mut whole) = (0u64, 0u64, Some(0u64));
            let mut prefix = None;
            for p in parts {
                let r = run(p);
                longest = longest.max(r.longest);
                match r.whole {
                    Some(n) => current = current.saturating_add(n),
                    None => {
                        longest = longest.max(current.saturating_add(r.prefix));
                        prefix.get_or_insert(current.saturating_add(r.prefix));
                        whole = None;
                        current = r.suffix;
                    }
                }
                longest = longest.max(current);
                whole = whole.map(|w| w.saturating_add(r.whole.unwrap_or(0)));
            }
            Run {
                whole,
                prefix: prefix.unwrap_or(current),
                suffix: current,
                longest,
            }
        }
        HirKind::Alternation(alts) => {
            // The same alternative written twice is that alternative.
            if alts.iter().all(|a| a == &alts[0]) {
                return run(&alts[0]);
            }
            // Entering one is a choice (no fixed start joins what comes before); once in
            // one, its fixed end is forced and joins what follows: the shortest of them.
            let runs: Vec<Run> = alts.iter().map(run).collect();
            Run {
                whole: None,
                prefix: 0,
                suffix: runs.iter().map(|r| r.suffix).min().unwrap_or(0),
                longest: runs.iter().map(|r| r.longest).max().unwrap_or(0),
            }
        }
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
        // Runs that continue out of a group, a repeat or an alternative, and the same
        // alternative twice; nesting as deep as llguidance's regex engine takes.
        for (p, n) in [
            ("^((((([ab]0{1000})0{1000})0{1000})0{1000})0{1000})$", 5000),
            ("^(?:xx|xx){50000}$", 100_000),
            ("^(a{600}|b{600})c{600}$", 1200),
            ("^([ab]c{600}){3}$", 600),
            ("^(c{600}[ab]){3}$", 600),
            ("^(c{300}[ab]c{300}){3}$", 600),
        ] {
            assert_eq!(pattern_run(p), Some(n), "{p}");
        }
        let deep = format!("^{}0{{100000}}{}$", "(".repeat(100), ")".repeat(100));
        assert_eq!(pattern_run(&deep), Some(100_000));
        // Nested counts multiply.
        assert_eq!(
            pattern_run("^((a{1000}){1000}){1000}$"),
            Some(1_000_000_000)
        );
    }
}
