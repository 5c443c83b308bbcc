//! Lists of strings in request bodies, read keeping only what can be used. `stop`,
//! Anthropic's `stop_sequences` and `dry_sequence_breakers` allow a few strings; a 4 MiB
//! body could list a million (each kept string costs its text and 24 bytes, and serde's
//! untagged enums buffer the whole field as a tree first). Read as [`Strings`] (or
//! [`OneOrMany`]), a list keeps its first `N + 1` strings, so a check past `N` still fails, and skips the
//! rest without keeping them, counting them for the error.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};

/// A list read with at most `N + 1` of its strings kept, and how many it had.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Strings<const N: usize> {
    /// The first strings, at most `N + 1`.
    pub kept: Vec<String>,
    /// How many the list held.
    pub len: usize,
}

/// A string, or a list of strings read as [`Strings`]: `stop`'s two forms.
#[derive(Clone, Debug, PartialEq)]
pub enum OneOrMany<const N: usize> {
    One(String),
    Many(Strings<N>),
}

struct ListVisitor<const N: usize>;

impl<'de, const N: usize> Visitor<'de> for ListVisitor<N> {
    type Value = Strings<N>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strings<N>, A::Error> {
        let mut out = Strings::<N>::default();
        while out.kept.len() <= N {
            match seq.next_element::<String>()? {
                Some(s) => out.kept.push(s),
                None => break,
            }
        }
        out.len = out.kept.len();
        if out.len > N {
            while seq.next_element::<IgnoredAny>()?.is_some() {
                out.len += 1;
            }
        }
        Ok(out)
    }
}

struct OneOrManyVisitor<const N: usize>;

impl<'de, const N: usize> Visitor<'de> for OneOrManyVisitor<N> {
    type Value = OneOrMany<N>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or an array of strings")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<OneOrMany<N>, E> {
        Ok(OneOrMany::One(s.to_string()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<OneOrMany<N>, E> {
        Ok(OneOrMany::One(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<OneOrMany<N>, A::Error> {
        ListVisitor::<N>.visit_seq(seq).map(OneOrMany::Many)
    }
}

impl<'de, const N: usize> serde::Deserialize<'de> for Strings<N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(ListVisitor::<N>)
    }
}

impl<'de, const N: usize> serde::Deserialize<'de> for OneOrMany<N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(OneOrManyVisitor::<N>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_keeps_one_past_the_bound_and_counts_the_rest() {
        let many: Strings<4> =
            serde_json::from_str(r#"["a","b","c","d","e","f",1,[2],{"x":3}]"#).unwrap();
        assert_eq!((many.kept.len(), many.len), (5, 9));
        let few: Strings<4> = serde_json::from_str(r#"["a",""]"#).unwrap();
        assert_eq!(
            (few.kept, few.len),
            (vec!["a".to_string(), String::new()], 2)
        );
        // A kept element that is not a string is an error, as is anything but a list.
        assert!(serde_json::from_str::<Strings<4>>(r#"["a",1]"#).is_err());
        assert!(serde_json::from_str::<Strings<4>>(r#""a""#).is_err());
    }

    #[test]
    fn one_or_many_reads_both_forms() {
        assert_eq!(
            serde_json::from_str::<OneOrMany<4>>(r#""x""#).unwrap(),
            OneOrMany::One("x".into())
        );
        let OneOrMany::Many(m) = serde_json::from_str::<OneOrMany<4>>(r#"["x","y"]"#).unwrap()
        else {
            panic!("a list")
        };
        assert_eq!(m.len, 2);
        let e = serde_json::from_str::<OneOrMany<4>>("3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a string or an array of strings"), "{e}");
    }
}
