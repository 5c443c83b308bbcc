//! Dequantization against the independent Python `gguf` package
//! (fixtures made by `scripts/make_fixtures.py`).

use inferd_quant::{dequantize_row_with, supported_levels, DType};

fn dtype_by_name(name: &str) -> DType {
    match name {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "Q8_0" => DType::Q8_0,
        "Q4_0" => DType::Q4_0,
        "Q4_1" => DType::Q4_1,
        "Q5_0" => DType::Q5_0,
        "Q4_K" => DType::Q4K,
        "Q5_K" => DType::Q5K,
        "Q6_K" => DType::Q6K,
        other => panic!("unknown dtype {other}"),
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Distance in units in the last place (same-sign ordering of the bit patterns).
fn ulps(a: f32, b: f32) -> u32 {
    let key = |v: f32| {
        let u = v.to_bits() as i64;
        if u & 0x8000_0000 != 0 {
            0x8000_0000 - u
        } else {
            u
        }
    };
    (key(a) - key(b)).unsigned_abs() as u32
}

#[test]
fn dequant_matches_gguf_python() {
    let text = include_str!("fixtures/dequant.json");
    let json: serde_json::Value = serde_json::from_str(text).unwrap();
    let cases = json["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 10, "one case per dtype, plus Q5_0");
    for case in cases {
        let name = case["dtype"].as_str().unwrap();
        let data = hex(case["data"].as_str().unwrap());
        let expected: Vec<f32> = case["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| f32::from_bits(v.as_u64().unwrap() as u32))
            .collect();
        let dtype = dtype_by_name(name);
        for level in supported_levels() {
            let mut got = vec![f32::NAN; expected.len()];
            dequantize_row_with(level, dtype, &data, &mut got).unwrap();
            for (i, (&g, &e)) in got.iter().zip(&expected).enumerate() {
                assert!(
                    ulps(g, e) <= 1,
                    "{dtype} at {level:?}: element {i}: got {g:e}, gguf {e:e}"
                );
            }
        }
    }
}
