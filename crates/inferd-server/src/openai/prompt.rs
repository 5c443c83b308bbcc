//! `/v1/completions`' `prompt`, read straight from the body's text: a string, an array of
//! one string, an array of token ids, or an array of one array of token ids. Token ids go
//! into `u32`s as they are parsed (a JSON tree would take about 30 times their text), and
//! a prompt of the wrong shape is skipped without being kept, to be answered with a 400
//! saying what is wrong.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;

/// What the request's `prompt` held.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
    /// Not a prompt this API takes; the message says why.
    Invalid(&'static str),
}

pub const NOT_A_PROMPT: &str =
    "`prompt` must be a string, an array of token ids, or an array of one of those";
pub const BAD_IDS: &str = "token ids must be non-negative integers";
pub const BATCHED: &str = "batched prompts are not supported: send one prompt per request";
pub const EMPTY: &str = "`prompt` must not be empty";

impl<'de> Deserialize<'de> for Prompt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PromptVisitor)
    }
}

struct PromptVisitor;

impl<'de> Visitor<'de> for PromptVisitor {
    type Value = Prompt;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(NOT_A_PROMPT)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Prompt, E> {
        Ok(Prompt::Text(s.to_string()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Prompt, E> {
        Ok(Prompt::Text(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Prompt, A::Error> {
        let Some(first) = seq.next_element::<Item>()? else {
            return Ok(Prompt::Invalid(EMPTY));
        };
        if let Item::Id(id) = first {
            // An array of token ids: the rest read as ids too.
            return ids(Some(id), seq);
        }
        // One string or one array of ids; anything after it makes a batch.
        if seq.next_element::<IgnoredAny>()?.is_some() {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Prompt::Invalid(BATCHED));
        }
        Ok(match first {
            Item::Text(s) => Prompt::Text(s),
            Item::Ids(p) => p,
            Item::Id(_) | Item::Other => Prompt::Invalid(NOT_A_PROMPT),
        })
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Prompt, A::Error> {
        IgnoredAny::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Prompt::Invalid(NOT_A_PROMPT))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Prompt, E> {
        Ok(Prompt::Invalid(NOT_A_PROMPT))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Prompt, E> {
        Ok(Prompt::Invalid(NOT_A_PROMPT))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Prompt, E> {
        Ok(Prompt::Invalid(NOT_A_PROMPT))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Prompt, E> {
        Ok(Prompt::Invalid(NOT_A_PROMPT))
    }
}

/// `first` (already read) and the rest of `seq` as token ids; what follows a bad one is
/// only skipped.
fn ids<'de, A: SeqAccess<'de>>(first: Option<Option<u32>>, mut seq: A) -> Result<Prompt, A::Error> {
    let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0) + 1);
    let mut ok = true;
    let mut next = first;
    loop {
        let id = match next {
            Some(id) => id,
            None => match seq.next_element::<Id>()? {
                Some(Id(id)) => id,
                None => break,
            },
        };
        next = None;
        match id {
            Some(t) if ok => ids.push(t),
            Some(_) => {}
            None => {
                ok = false;
                ids = Vec::new();
            }
        }
    }
    Ok(if ok {
        Prompt::Ids(ids)
    } else {
        Prompt::Invalid(BAD_IDS)
    })
}

/// A token id: `None` for anything that is not a non-negative integer below 2^32
/// (skipped, not kept).
struct Id(Option<u32>);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IdVisitor).map(Id)
    }
}

struct IdVisitor;

impl<'de> Visitor<'de> for IdVisitor {
    type Value = Option<u32>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(BAD_IDS)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Option<u32>, E> {
        Ok(u32::try_from(n).ok())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Option<u32>, E> {
        Ok(u32::try_from(n).ok())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<u32>, A::Error> {
        IgnoredAny::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(None)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Option<u32>, A::Error> {
        IgnoredAny::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(None)
    }
}

/// The first item of an array prompt.
enum Item {
    /// A number (a token id when `Some`).
    Id(Option<u32>),
    Text(String),
    /// An array: read as a prompt of ids (or `Invalid`).
    Ids(Prompt),
    Other,
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ItemVisitor)
    }
}

struct ItemVisitor;

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Item;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(NOT_A_PROMPT)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Item, E> {
        Ok(Item::Id(u32::try_from(n).ok()))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Item, E> {
        Ok(Item::Id(u32::try_from(n).ok()))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Item, E> {
        Ok(Item::Id(None))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Item, E> {
        Ok(Item::Text(s.to_string()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Item, E> {
        Ok(Item::Text(s))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Item, E> {
        Ok(Item::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Item, E> {
        Ok(Item::Other)
    }

    /// An inner array holds token ids only.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Item, A::Error> {
        ids(None, seq).map(Item::Ids)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Item, A::Error> {
        IgnoredAny::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Item::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Prompt {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn every_shape_the_api_takes() {
        assert_eq!(read(r#""hi""#), Prompt::Text("hi".into()));
        assert_eq!(read(r#"["hi"]"#), Prompt::Text("hi".into()));
        assert_eq!(read("[1, 2, 3]"), Prompt::Ids(vec![1, 2, 3]));
        assert_eq!(read("[[7, 4294967295]]"), Prompt::Ids(vec![7, u32::MAX]));
        assert_eq!(read("[[]]"), Prompt::Ids(vec![]));
    }

    #[test]
    fn wrong_shapes_say_why() {
        assert_eq!(read("[]"), Prompt::Invalid(EMPTY));
        for bad in [
            "[1, -2]",
            "[1, 2.5]",
            "[4294967296]",
            "[1, \"x\"]",
            "[1, [2]]",
            "[[1, {}]]",
        ] {
            assert_eq!(read(bad), Prompt::Invalid(BAD_IDS), "{bad}");
        }
        for batch in [r#"["a", "b"]"#, "[[1], [2]]", r#"[[1], "b"]"#, "[true, 1]"] {
            assert_eq!(read(batch), Prompt::Invalid(BATCHED), "{batch}");
        }
        for other in [
            "5",
            "true",
            "{}",
            r#"{"a": [1]}"#,
            "[true]",
            "[{}]",
            "[null]",
        ] {
            assert_eq!(read(other), Prompt::Invalid(NOT_A_PROMPT), "{other}");
        }
    }

    #[test]
    fn malformed_json_is_still_an_error() {
        assert!(serde_json::from_str::<Prompt>("[1, 2").is_err());
        assert!(serde_json::from_str::<Prompt>("[[1, 2]").is_err());
    }
}
