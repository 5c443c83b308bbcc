//! GPT-2 byte-level BPE's byte <-> char table: a byte-level vocabulary writes every byte
//! as one printable char (printable Latin-1 bytes as themselves, the other 68 as the
//! chars from U+0100 on, in byte order), e.g. space as `Ġ` and newline as `Ċ`.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The byte a byte-level piece's char stands for; `None` for a char outside the table.
pub fn char_to_byte(c: char) -> Option<u8> {
    static TABLE: OnceLock<HashMap<char, u8>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            let mut next = 0x100u32;
            let mut map = HashMap::with_capacity(256);
            for b in 0..=255u8 {
                let c = if printable(b) {
                    char::from(b)
                } else {
                    let c = char::from_u32(next).unwrap_or('\u{FFFD}');
                    next += 1;
                    c
                };
                map.insert(c, b);
            }
            map
        })
        .get(&c)
        .copied()
}

/// A byte-level piece's bytes; `None` when a char is outside the table.
pub fn piece_bytes(piece: &str) -> Option<Vec<u8>> {
    piece.chars().map(char_to_byte).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_a_bijection_with_gpt2_landmarks() {
        let mut bytes: Vec<u8> = (0..0x200u32)
            .filter_map(char::from_u32)
            .filter_map(char_to_byte)
            .collect();
        bytes.sort();
        bytes.dedup();
        assert_eq!(bytes.len(), 256);
        assert_eq!(char_to_byte('\u{120}'), Some(b' '));
        assert_eq!(char_to_byte('\u{10A}'), Some(b'\n'));
        assert_eq!(char_to_byte('A'), Some(b'A'));
        assert_eq!(piece_bytes("Ġthe"), Some(b" the".to_vec()));
        assert_eq!(char_to_byte('€'), None);
    }
}
