//! GGUF reader/writer tests: round trips, layout, and every validation error.

use std::path::{Path, PathBuf};

use super::meta::type_id;
use super::*;
use crate::test_util::TempDir;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Every metadata type, including nested and empty arrays.
fn all_meta() -> Vec<(&'static str, MetaValue)> {
    vec![
        ("t.u8", MetaValue::U8(200)),
        ("t.i8", MetaValue::I8(-100)),
        ("t.u16", MetaValue::U16(60000)),
        ("t.i16", MetaValue::I16(-30000)),
        ("t.u32", MetaValue::U32(4_000_000_000)),
        ("t.i32", MetaValue::I32(-2_000_000_000)),
        ("t.u64", MetaValue::U64(u64::MAX - 1)),
        ("t.i64", MetaValue::I64(i64::MIN + 1)),
        ("t.f32", MetaValue::F32(1.5e-5)),
        ("t.f64", MetaValue::F64(-2.25e100)),
        ("t.bool", MetaValue::Bool(true)),
        ("t.bool2", MetaValue::Bool(false)),
        ("t.str", MetaValue::from("héllo ✓")),
        ("t.empty_str", MetaValue::from("")),
        ("t.strs", MetaValue::from(vec!["a", "", "<0x0A>"])),
        ("t.i32s", MetaValue::from(vec![1i32, -2, 3])),
        ("t.f32s", MetaValue::from(vec![0.5f32, -1.0])),
        ("t.empty", MetaValue::Array(vec![])),
        (
            "t.nested",
            MetaValue::Array(vec![
                MetaValue::from(vec![1u8, 2]),
                MetaValue::from(vec![3u8]),
                MetaValue::Array(vec![]),
            ]),
        ),
    ]
}

/// A small file: metadata, an F32 [2, 3] weight, a Q8_0 [2, 32] weight.
fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_meta("general.architecture", "llama");
    for (k, v) in all_meta() {
        w.add_meta(k, v);
    }
    w.add_f32_tensor("w.f32", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap();
    let q8: Vec<u8> = (0..68u8).collect(); // 2 rows x 1 block x 34 bytes
    w.add_tensor("w.q8", DType::Q8_0, &[2, 32], q8).unwrap();
    w
}

fn parse_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
    GgufFile::from_bytes("mem.gguf", bytes)
}

/// Asserts the message starts with the file label and mentions `needle`.
fn assert_names(err: &FormatError, file: &str, needle: &str) {
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("{file}: ")), "{msg}");
    assert!(msg.contains(needle), "'{needle}' not in: {msg}");
    assert_eq!(err.path(), Path::new(file));
}

#[test]
fn round_trip_metadata_and_tensors_through_a_file() {
    let dir = TempDir::new("gguf-rt");
    let path = sample_writer().write_to_file(dir.join("m.gguf")).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.path(), path);
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.architecture().unwrap(), "llama");
    for (k, v) in all_meta() {
        assert_eq!(f.meta(k), Some(&v), "key {k}");
    }
    assert_eq!(f.metadata().len(), all_meta().len() + 1);

    let names: Vec<&str> = f.tensor_infos().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["w.f32", "w.q8"]);
    let t = f.tensor("w.f32").unwrap();
    assert_eq!((t.dtype, t.shape), (DType::F32, &[2usize, 3][..]));
    assert_eq!(t.to_f32_vec().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(t.file, path.as_path());
    let q = f.tensor("w.q8").unwrap();
    assert_eq!((q.dtype, q.shape), (DType::Q8_0, &[2usize, 32][..]));
    assert_eq!(q.data, (0..68u8).collect::<Vec<_>>());
    // Tensors start on aligned offsets; the data section too.
    for info in f.tensor_infos() {
        assert_eq!(info.offset % 32, 0, "{}", info.name);
    }
    assert_eq!(f.data_offset() % 32, 0);
    assert_eq!(f.tensor_info("w.q8").unwrap().nbytes, 68);

    let src: &dyn TensorSource = &f;
    assert!(src.has("w.q8") && !src.has("nope"));
    assert_eq!(src.tensor_names(), ["w.f32", "w.q8"]);
}

#[test]
fn every_tensor_type_round_trips() {
    let mut w = GgufWriter::new();
    let types = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
    ];
    for (i, &dt) in types.iter().enumerate() {
        let shape = [3, 256];
        let n = dt.bytes_for(3 * 256).unwrap();
        let data: Vec<u8> = (0..n).map(|j| (j * 7 + i) as u8).collect();
        w.add_tensor(format!("t{i}"), dt, &shape, data).unwrap();
    }
    let f = parse_bytes(w.to_bytes().unwrap()).unwrap();
    for (i, &dt) in types.iter().enumerate() {
        let t = f.tensor(&format!("t{i}")).unwrap();
        assert_eq!(t.dtype, dt);
        assert_eq!(t.shape, [3, 256]);
        let n = dt.bytes_for(3 * 256).unwrap();
        let expect: Vec<u8> = (0..n).map(|j| (j * 7 + i) as u8).collect();
        assert_eq!(t.data, expect, "{dt}");
        assert_eq!(t.row_bytes(), dt.bytes_for(256).unwrap());
    }
}

#[test]
fn shape_is_reverse_of_ggml_ne() {
    let mut w = GgufWriter::new();
    // ne = [4 (in), 2 (out)] innermost first, as GGML writes a [out=2, in=4] weight.
    w.add_raw_tensor(
        "lin",
        DType::F32.ggml_id(),
        vec![4, 2],
        f32_bytes(&[0.0; 8]),
    );
    let f = parse_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.tensor("lin").unwrap().shape, [2, 4]);
    assert_eq!(f.tensor_infos()[0].shape, vec![2, 4]);
}

#[test]
fn custom_alignment_is_honoured() {
    let mut w = sample_writer();
    w.set_alignment(256);
    w.add_f32_tensor("w.tail", &[1], &[7.0]).unwrap();
    let bytes = w.to_bytes().unwrap();
    let f = parse_bytes(bytes).unwrap();
    assert_eq!(f.alignment(), 256);
    assert_eq!(f.data_offset() % 256, 0);
    for info in f.tensor_infos() {
        assert_eq!(info.offset % 256, 0, "{}", info.name);
    }
    assert_eq!(f.tensor("w.tail").unwrap().to_f32_vec().unwrap(), [7.0]);
    assert_eq!(f.tensor("w.q8").unwrap().data[0..3], [0, 1, 2]);
}

#[test]
fn bad_alignment_is_rejected() {
    let mut w = GgufWriter::new();
    w.add_meta("general.alignment", MetaValue::U32(48));
    let err = parse_bytes(w.to_bytes().unwrap()).unwrap_err();
    assert!(
        matches!(err, FormatError::InvalidMetadata { ref key, .. } if key == "general.alignment")
    );
    assert_names(&err, "mem.gguf", "general.alignment");
}

#[test]
fn version_2_is_read() {
    let mut w = sample_writer();
    w.set_version(2);
    let f = parse_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.meta("t.u64"), Some(&MetaValue::U64(u64::MAX - 1)));
    assert_eq!(f.tensor("w.f32").unwrap().to_f32_vec().unwrap()[5], 6.0);
}

#[test]
fn typed_getters() {
    let f = parse_bytes(sample_writer().to_bytes().unwrap()).unwrap();
    assert_eq!(f.meta_u64("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(f.meta_u32("t.u16").unwrap(), 60000);
    assert_eq!(f.meta_usize("t.u8").unwrap(), 200);
    assert_eq!(f.meta_i64("t.i8").unwrap(), -100);
    assert_eq!(f.meta_f32("t.f32").unwrap(), 1.5e-5);
    assert_eq!(f.meta_f32("t.u8").unwrap(), 200.0);
    assert_eq!(f.meta_f64("t.f64").unwrap(), -2.25e100);
    assert_eq!(f.meta_str("t.str").unwrap(), "héllo ✓");
    assert!(f.meta_bool("t.bool").unwrap());
    assert_eq!(f.meta_str_array("t.strs").unwrap(), ["a", "", "<0x0A>"]);
    assert_eq!(f.meta_i32_array("t.i32s").unwrap(), [1, -2, 3]);
    assert_eq!(f.meta_f32_array("t.f32s").unwrap(), [0.5, -1.0]);
    assert_eq!(f.meta_str_array("t.empty").unwrap(), Vec::<&str>::new());
    assert_eq!(f.opt_u64("absent").unwrap(), None);
    assert_eq!(f.opt_str("t.str").unwrap(), Some("héllo ✓"));

    let err = f.meta_u64("absent.key").unwrap_err();
    assert!(matches!(err, FormatError::MissingMetadata { .. }));
    assert_names(&err, "mem.gguf", "'absent.key'");

    for err in [
        f.meta_u64("t.i8").unwrap_err(),  // negative
        f.meta_u32("t.u64").unwrap_err(), // too large
        f.meta_str("t.u8").unwrap_err(),
        f.opt_bool("t.str").unwrap_err(),
        f.meta_str_array("t.i32s").unwrap_err(),
        f.meta_i32_array("t.u32").unwrap_err(),
    ] {
        assert!(matches!(err, FormatError::InvalidMetadata { .. }), "{err}");
        assert_names(&err, "mem.gguf", "'t.");
    }
    let err = f.meta_str("t.u8").unwrap_err();
    assert_eq!(
        err.to_string(),
        "mem.gguf: metadata key 't.u8' is invalid: expected a string, found u8 U8(200)"
    );
}

#[test]
fn bad_magic() {
    let mut bytes = sample_writer().to_bytes().unwrap();
    bytes[..4].copy_from_slice(b"GGML");
    let err = parse_bytes(bytes).unwrap_err();
    assert!(matches!(err, FormatError::BadMagic { ref found, .. } if found == b"GGML"));
    assert_names(&err, "mem.gguf", "not a GGUF file");

    let err = parse_bytes(b"PK".to_vec()).unwrap_err();
    assert!(matches!(err, FormatError::BadMagic { .. }), "{err}");
}

#[test]
fn unsupported_versions() {
    for v in [1u32, 4, 0x0300_0000] {
        let mut w = sample_writer();
        w.set_version(v);
        let err = parse_bytes(w.to_bytes().unwrap()).unwrap_err();
        assert!(
            matches!(err, FormatError::UnsupportedVersion { version, .. } if version == v),
            "{err}"
        );
        assert_names(&err, "mem.gguf", &format!("version {v}"));
    }
}

/// Byte offsets of the regions of `sample_writer()`'s file.
fn sample_regions() -> (usize, usize, usize, usize) {
    let bytes = sample_writer().to_bytes().unwrap();
    let f = parse_bytes(bytes.clone()).unwrap();
    // Metadata ends where the first tensor info (name "w.f32") begins.
    let name = b"\x05\0\0\0\0\0\0\0w.f32";
    let infos = bytes
        .windows(name.len())
        .position(|w| w == name)
        .expect("first tensor info");
    (24, infos, f.data_offset(), bytes.len())
}

#[test]
fn truncation_at_every_region_is_an_error() {
    let bytes = sample_writer().to_bytes().unwrap();
    let (meta_start, infos_start, data_start, len) = sample_regions();
    // Cut points: inside the header, inside the metadata, inside the tensor
    // infos, in the padding before the data, inside the data.
    let cuts = [
        (2, "magic"),
        (6, "version"),
        (12, "tensor count"),
        (meta_start + 3, "metadata (20 metadata entries)"),
        (meta_start + 300, "metadata entry #13 (key length)"),
        (infos_start - 1, "metadata 't.nested'"),
        (infos_start + 3, "tensor infos (2 tensor infos)"),
        (infos_start + 50, "tensor info #1"),
        (infos_start + 60, "tensor info 'w.q8'"),
        (data_start - 1, "w.f32"),
        (data_start + 10, "w.f32"),
        (len - 1, "w.q8"),
    ];
    for (cut, needle) in cuts {
        let err = parse_bytes(bytes[..cut].to_vec()).unwrap_err();
        let ok_variant = if cut >= data_start - 1 {
            matches!(err, FormatError::TensorOutOfBounds { .. })
        } else {
            matches!(err, FormatError::Truncated { .. })
        };
        assert!(ok_variant, "cut at {cut}: {err}");
        assert_names(&err, "mem.gguf", needle);
    }
    // Every single cut point fails cleanly (no panic, an error).
    for cut in 0..len {
        assert!(parse_bytes(bytes[..cut].to_vec()).is_err(), "cut at {cut}");
    }
}

#[test]
fn tensor_past_end_of_file() {
    let mut w = GgufWriter::new();
    // Claims [64, 64] f32 (16 KiB) but carries only 64 bytes.
    w.add_raw_tensor("blk.0.attn_q.weight", 0, vec![64, 64], vec![0u8; 64]);
    let bytes = w.to_bytes().unwrap();
    let len = bytes.len();
    let err = parse_bytes(bytes).unwrap_err();
    match &err {
        FormatError::TensorOutOfBounds {
            offset,
            nbytes,
            file_len,
            ..
        } => assert_eq!((*nbytes, *file_len), (16384, len as u64), "offset {offset}"),
        e => panic!("unexpected {e}"),
    }
    assert_names(
        &err,
        "mem.gguf",
        "tensor 'blk.0.attn_q.weight' runs past the end",
    );
}

#[test]
fn huge_offset_does_not_overflow() {
    let mut bytes = {
        let mut w = GgufWriter::new();
        w.add_f32_tensor("t", &[1], &[1.0]).unwrap();
        w.to_bytes().unwrap()
    };
    // Header (24) + name (8 + 1) + n_dims (4) + ne (8) + type (4) + offset (8):
    // the offset is the last u64 of the tensor info; patch it to near u64::MAX.
    let info_end = 24 + (8 + 1) + 4 + 8 + 4 + 8;
    bytes[info_end - 8..info_end].copy_from_slice(&(u64::MAX - 31).to_le_bytes());
    let err = parse_bytes(bytes).unwrap_err();
    assert!(
        matches!(err, FormatError::TensorOutOfBounds { .. }),
        "{err}"
    );
}

#[test]
fn unknown_and_unsupported_type_ids() {
    let mut w = GgufWriter::new();
    w.add_raw_tensor("weird", 99, vec![32], vec![0u8; 64]);
    let err = parse_bytes(w.to_bytes().unwrap()).unwrap_err();
    assert!(
        matches!(err, FormatError::UnknownType { type_id: 99, .. }),
        "{err}"
    );
    assert_names(&err, "mem.gguf", "tensor 'weird' has unknown type id 99");

    let mut w = GgufWriter::new();
    w.add_raw_tensor("q5_1", 7, vec![32], vec![0u8; 24]);
    let err = parse_bytes(w.to_bytes().unwrap()).unwrap_err();
    assert!(matches!(err, FormatError::UnsupportedType { .. }), "{err}");
    assert_names(
        &err,
        "mem.gguf",
        "tensor 'q5_1' has unsupported type Q5_1 (ggml type 7)",
    );
}

#[test]
fn partial_blocks_are_rejected() {
    let mut w = GgufWriter::new();
    // 40 elements per row is not a whole number of 32-element Q8_0 blocks.
    w.add_raw_tensor("rows", DType::Q8_0.ggml_id(), vec![40, 2], vec![0u8; 256]);
    let err = parse_bytes(w.to_bytes().unwrap()).unwrap_err();
    assert!(matches!(err, FormatError::InvalidTensor { .. }), "{err}");
    assert_names(&err, "mem.gguf", "tensor 'rows'");

    // The writer refuses the same thing up front.
    let err = GgufWriter::new()
        .add_tensor("rows", DType::Q8_0, &[2, 40], vec![0u8; 68])
        .err()
        .unwrap();
    assert!(matches!(err, FormatError::InvalidTensor { .. }));
    let err = GgufWriter::new()
        .add_tensor("short", DType::F32, &[2, 2], vec![0u8; 15])
        .err()
        .unwrap();
    assert!(err.to_string().contains("15 bytes given"), "{err}");
}

#[test]
fn missing_tensor_and_bad_shape() {
    let dir = TempDir::new("gguf-missing");
    let path = sample_writer()
        .write_to_file(dir.join("model.gguf"))
        .unwrap();
    let f = GgufFile::open(&path).unwrap();
    let file = path.display().to_string();

    let err = f.tensor("blk.9.ffn_up.weight").unwrap_err();
    assert!(matches!(err, FormatError::MissingTensor { .. }));
    assert_names(&err, &file, "tensor 'blk.9.ffn_up.weight' not found");

    let err = f
        .tensor("w.f32")
        .unwrap()
        .expect_shape(&[3, 2])
        .unwrap_err();
    assert!(matches!(err, FormatError::BadShape { .. }));
    assert_eq!(
        err.to_string(),
        format!("{file}: tensor 'w.f32' has shape [2, 3], expected [3, 2]")
    );
}

#[test]
fn duplicate_names_are_rejected() {
    let mut w = GgufWriter::new();
    w.add_raw_tensor("dup", 0, vec![1], f32_bytes(&[1.0]));
    w.add_raw_tensor("dup", 0, vec![1], f32_bytes(&[2.0]));
    let err = parse_bytes(w.to_bytes().unwrap()).unwrap_err();
    assert!(matches!(err, FormatError::InvalidTensor { .. }), "{err}");
    assert_names(&err, "mem.gguf", "'dup'");
}

/// A header claiming `tensors` tensors and `kvs` metadata entries, then `tail`.
fn header(tensors: u64, kvs: u64, tail: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&tensors.to_le_bytes());
    b.extend_from_slice(&kvs.to_le_bytes());
    b.extend_from_slice(tail);
    b
}

fn key(name: &str, ty: u32) -> Vec<u8> {
    let mut b = (name.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(&ty.to_le_bytes());
    b
}

#[test]
fn absurd_counts_fail_without_huge_allocations() {
    // Counts of 2^60: rejected as needing more bytes than the file has.
    for (t, k) in [(1u64 << 60, 0u64), (0, 1 << 60), (u64::MAX, u64::MAX)] {
        let err = parse_bytes(header(t, k, &[0u8; 64])).unwrap_err();
        assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
        assert_names(&err, "mem.gguf", "mem.gguf");
    }
    // A string length of 2^62.
    let mut tail = (1u64 << 62).to_le_bytes().to_vec();
    tail.extend_from_slice(&[b'a'; 32]);
    let err = parse_bytes(header(0, 1, &tail)).unwrap_err();
    assert!(
        matches!(err, FormatError::Truncated { needed, .. } if needed == 1 << 62),
        "{err}"
    );
    // An array of 2^61 u32s.
    let mut tail = key("big", type_id::ARRAY);
    tail.extend_from_slice(&type_id::U32.to_le_bytes());
    tail.extend_from_slice(&(1u64 << 61).to_le_bytes());
    tail.extend_from_slice(&[0u8; 16]);
    let err = parse_bytes(header(0, 1, &tail)).unwrap_err();
    assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
    assert_names(&err, "mem.gguf", "metadata 'big'");
    // An array of 2^40 empty arrays (each at least 12 bytes).
    let mut tail = key("nest", type_id::ARRAY);
    tail.extend_from_slice(&type_id::ARRAY.to_le_bytes());
    tail.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let err = parse_bytes(header(0, 1, &tail)).unwrap_err();
    assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
    // Too many dimensions, and dimensions whose product overflows.
    let mut w = GgufWriter::new();
    w.add_raw_tensor("many", 0, vec![1; 5], vec![0u8; 4]);
    let err = parse_bytes(w.to_bytes().unwrap()).unwrap_err();
    assert!(matches!(err, FormatError::InvalidTensor { .. }), "{err}");
    assert_names(&err, "mem.gguf", "'many'");
    let mut w = GgufWriter::new();
    w.add_raw_tensor("huge", 0, vec![1 << 40, 1 << 40], vec![0u8; 4]);
    let err = parse_bytes(w.to_bytes().unwrap()).unwrap_err();
    assert!(matches!(err, FormatError::InvalidTensor { .. }), "{err}");
    assert_names(&err, "mem.gguf", "'huge'");
}

#[test]
fn malformed_metadata_values() {
    // Unknown value type.
    let mut tail = key("odd", 77);
    tail.extend_from_slice(&[0u8; 8]);
    let err = parse_bytes(header(0, 1, &tail)).unwrap_err();
    assert!(matches!(err, FormatError::Malformed { .. }), "{err}");
    assert_names(&err, "mem.gguf", "metadata 'odd': unknown value type id 77");
    // A bool that is neither 0 nor 1.
    let mut tail = key("b", type_id::BOOL);
    tail.push(2);
    let err = parse_bytes(header(0, 1, &tail)).unwrap_err();
    assert_names(&err, "mem.gguf", "'b'");
    // Invalid UTF-8 in a string.
    let mut tail = key("s", type_id::STRING);
    tail.extend_from_slice(&2u64.to_le_bytes());
    tail.extend_from_slice(&[0xff, 0xfe]);
    let err = parse_bytes(header(0, 1, &tail)).unwrap_err();
    assert_names(&err, "mem.gguf", "UTF-8");
    // Nesting deeper than the limit.
    let mut tail = key("deep", type_id::ARRAY);
    for _ in 0..20 {
        tail.extend_from_slice(&type_id::ARRAY.to_le_bytes());
        tail.extend_from_slice(&1u64.to_le_bytes());
    }
    tail.extend_from_slice(&[0u8; 12]);
    let err = parse_bytes(header(0, 1, &tail)).unwrap_err();
    assert_names(&err, "mem.gguf", "nested deeper");
    // Duplicate key.
    let mut tail = key("k", type_id::U8);
    tail.push(1);
    tail.extend_from_slice(&key("k", type_id::U8));
    tail.push(2);
    let err = parse_bytes(header(0, 2, &tail)).unwrap_err();
    assert!(matches!(err, FormatError::InvalidMetadata { .. }), "{err}");
}

#[test]
fn writer_rejects_mixed_arrays() {
    let mut w = GgufWriter::new();
    w.add_meta(
        "mixed",
        MetaValue::Array(vec![MetaValue::U8(1), MetaValue::I32(2)]),
    );
    let err = w.to_bytes().unwrap_err();
    assert!(matches!(err, FormatError::InvalidMetadata { .. }), "{err}");
}

#[test]
fn open_missing_file_names_it() {
    let path = std::env::temp_dir().join("inferd-formats-missing/none.gguf");
    let err = GgufFile::open(&path).unwrap_err();
    assert!(matches!(err, FormatError::Io { .. }));
    assert!(err.to_string().starts_with(&path.display().to_string()));
}

/// Where the real SmolLM2 GGUF may be, if it has been downloaded.
fn smollm2_path() -> Option<PathBuf> {
    let cache = std::env::var_os("INFERD_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/inferd")));
    cache
        .map(|c| c.join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"))
        .filter(|p| p.is_file())
}

#[test]
fn real_smollm2_gguf() {
    let Some(path) = smollm2_path() else {
        if std::env::var("INFERD_REQUIRE_MODELS").as_deref() == Ok("1") {
            panic!("INFERD_REQUIRE_MODELS=1 but SmolLM2-135M-Instruct.Q4_1.gguf was not found");
        }
        eprintln!("skipping: SmolLM2 GGUF not present");
        return;
    };
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.tensor_infos().len(), 272);
    assert_eq!(f.architecture().unwrap(), "llama");
    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!(emb.dtype, DType::Q8_0);
    assert_eq!(emb.shape, [49152, 576]);
    emb.expect_shape(&[49152, 576]).unwrap();
    assert_eq!(f.meta_u64("llama.embedding_length").unwrap(), 576);
    assert_eq!(f.meta_u64("llama.block_count").unwrap(), 30);
    let tokens = f.meta_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 49152);
    let q = f.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.shape, [576, 576]);
    let norm = f.tensor("output_norm.weight").unwrap();
    assert_eq!(norm.dtype, DType::F32);
    assert!(norm.to_f32_vec().unwrap().iter().all(|v| v.is_finite()));
}
