//! Safetensors tests: round trips, shards, and validation errors.

use std::path::Path;

use super::*;
use crate::test_util::TempDir;

/// One tensor for the hand-rolled writer: name, dtype string, shape, bytes.
type Spec<'a> = (&'a str, &'a str, Vec<usize>, Vec<u8>);

/// Builds a safetensors image by hand: offsets in the given order.
fn build(tensors: &[Spec<'_>]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    let json = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&data);
    out
}

/// Builds an image with a raw JSON header.
fn build_raw(json: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(data);
    out
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect()
}
fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
        .collect()
}

fn assert_names(err: &FormatError, file: &Path, needle: &str) {
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("{}: ", file.display())), "{msg}");
    assert!(msg.contains(needle), "'{needle}' not in: {msg}");
}

const VALS: [f32; 6] = [1.0, -2.5, 0.125, 3.0, -0.75, 1024.0];

#[test]
fn single_file_round_trip_f32_f16_bf16() {
    let dir = TempDir::new("st-single");
    let bytes = build(&[
        ("a.f32", "F32", vec![2, 3], f32_bytes(&VALS)),
        ("b.f16", "F16", vec![3, 2], f16_bytes(&VALS)),
        ("c.bf16", "BF16", vec![6], bf16_bytes(&VALS)),
    ]);
    std::fs::write(dir.join(SINGLE_FILE), bytes).unwrap();
    // Open by directory and by file: the same tensors.
    for opened in [dir.path().to_path_buf(), dir.join(SINGLE_FILE)] {
        let m = SafetensorsModel::open(&opened).unwrap();
        assert_eq!(m.path(), opened);
        assert_eq!(m.tensor_names(), ["a.f32", "b.f16", "c.bf16"]);
        assert_eq!(m.metadata().get("format").map(String::as_str), Some("pt"));
        let a = m.tensor("a.f32").unwrap();
        assert_eq!((a.dtype, a.shape), (DType::F32, &[2usize, 3][..]));
        assert_eq!(a.to_f32_vec().unwrap(), VALS);
        assert_eq!(a.file, dir.join(SINGLE_FILE));
        let b = m.tensor("b.f16").unwrap();
        assert_eq!((b.dtype, b.shape), (DType::F16, &[3usize, 2][..]));
        assert_eq!(b.to_f32_vec().unwrap(), VALS); // all exact in f16
        let c = m.tensor("c.bf16").unwrap();
        assert_eq!(c.dtype, DType::BF16);
        assert_eq!(c.to_f32_vec().unwrap(), VALS); // all exact in bf16
        assert!(m.has("c.bf16") && !m.has("d"));
    }
}

#[test]
fn reads_files_written_by_the_reference_crate() {
    use ::safetensors::tensor::{serialize, TensorView as RefView};
    use ::safetensors::Dtype;
    let a = f32_bytes(&VALS);
    let b = bf16_bytes(&VALS);
    let views = vec![
        ("x", RefView::new(Dtype::F32, vec![3, 2], &a).unwrap()),
        ("y", RefView::new(Dtype::BF16, vec![1, 6], &b).unwrap()),
    ];
    let bytes = serialize(views, None).unwrap();
    let dir = TempDir::new("st-ref");
    let path = dir.join("ref.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let m = SafetensorsModel::open(&path).unwrap();
    let x = m.tensor("x").unwrap();
    assert_eq!(x.shape, [3, 2]);
    assert_eq!(x.to_f32_vec().unwrap(), VALS);
    let y = m.tensor("y").unwrap();
    assert_eq!((y.dtype, y.shape), (DType::BF16, &[1usize, 6][..]));
    assert_eq!(y.to_f32_vec().unwrap(), VALS);
}

fn write_sharded(dir: &TempDir, weight_map: serde_json::Value) {
    let s1 = build(&[("l0.w", "F32", vec![2], f32_bytes(&[1.0, 2.0]))]);
    let s2 = build(&[
        ("l1.w", "BF16", vec![1, 2], bf16_bytes(&[3.0, 4.0])),
        ("lm_head", "F16", vec![1], f16_bytes(&[5.0])),
    ]);
    std::fs::write(dir.join("model-00001-of-00002.safetensors"), s1).unwrap();
    std::fs::write(dir.join("model-00002-of-00002.safetensors"), s2).unwrap();
    let index = serde_json::json!({"metadata": {"total_size": 14}, "weight_map": weight_map});
    std::fs::write(dir.join(INDEX_FILE), index.to_string()).unwrap();
}

#[test]
fn sharded_index() {
    let dir = TempDir::new("st-shard");
    write_sharded(
        &dir,
        serde_json::json!({
            "l0.w": "model-00001-of-00002.safetensors",
            "l1.w": "model-00002-of-00002.safetensors",
            "lm_head": "model-00002-of-00002.safetensors",
        }),
    );
    for opened in [dir.path().to_path_buf(), dir.join(INDEX_FILE)] {
        let m = SafetensorsModel::open(&opened).unwrap();
        assert_eq!(m.shard_paths().len(), 2);
        assert_eq!(m.tensor_names(), ["l0.w", "l1.w", "lm_head"]);
        assert_eq!(m.tensor("l0.w").unwrap().to_f32_vec().unwrap(), [1.0, 2.0]);
        let l1 = m.tensor("l1.w").unwrap();
        assert_eq!(l1.to_f32_vec().unwrap(), [3.0, 4.0]);
        assert_eq!(l1.file, dir.join("model-00002-of-00002.safetensors"));
        assert_eq!(m.tensor("lm_head").unwrap().to_f32_vec().unwrap(), [5.0]);
        let err = m.tensor("nope").unwrap_err();
        assert!(matches!(err, FormatError::MissingTensor { .. }));
        assert_names(&err, &opened, "tensor 'nope' not found");
    }
}

#[test]
fn sharded_index_errors() {
    // The index names a tensor its shard lacks.
    let dir = TempDir::new("st-shard-missing");
    write_sharded(
        &dir,
        serde_json::json!({"ghost": "model-00001-of-00002.safetensors",
                           "l1.w": "model-00002-of-00002.safetensors"}),
    );
    let err = SafetensorsModel::open(dir.path()).unwrap_err();
    assert!(matches!(err, FormatError::MissingTensor { .. }), "{err}");
    assert_names(
        &err,
        &dir.join("model-00001-of-00002.safetensors"),
        "'ghost'",
    );

    // The index points outside its directory.
    let dir = TempDir::new("st-shard-escape");
    write_sharded(
        &dir,
        serde_json::json!({"l0.w": "../elsewhere.safetensors"}),
    );
    let err = SafetensorsModel::open(dir.path()).unwrap_err();
    assert!(matches!(err, FormatError::Malformed { .. }), "{err}");
    assert_names(&err, &dir.join(INDEX_FILE), "l0.w");

    // A shard listed in the index does not exist.
    let dir = TempDir::new("st-shard-absent");
    write_sharded(&dir, serde_json::json!({"l0.w": "model-00009.safetensors"}));
    let err = SafetensorsModel::open(dir.path()).unwrap_err();
    assert!(matches!(err, FormatError::Io { .. }), "{err}");
    assert_names(&err, &dir.join("model-00009.safetensors"), "");

    // The index is not valid JSON.
    let dir = TempDir::new("st-shard-json");
    std::fs::write(dir.join(INDEX_FILE), "{\"weight_map\": 3").unwrap();
    let err = SafetensorsModel::open(dir.path()).unwrap_err();
    assert!(matches!(err, FormatError::Json { .. }), "{err}");
    assert_names(&err, &dir.join(INDEX_FILE), "invalid JSON");

    // The same tensor in two shards.
    let dir = TempDir::new("st-shard-dup");
    let dup = build(&[("l0.w", "F32", vec![1], f32_bytes(&[9.0]))]);
    write_sharded(
        &dir,
        serde_json::json!({"l0.w": "model-00001-of-00002.safetensors",
                           "l1.w": "model-00002-of-00002.safetensors"}),
    );
    std::fs::write(dir.join("model-00002-of-00002.safetensors"), dup).unwrap();
    let err = SafetensorsModel::open(dir.path()).unwrap_err();
    assert!(matches!(err, FormatError::InvalidTensor { .. }), "{err}");
    assert!(err.to_string().contains("also present in"), "{err}");

    // A directory with no model at all.
    let dir = TempDir::new("st-empty");
    let err = SafetensorsModel::open(dir.path()).unwrap_err();
    assert!(matches!(err, FormatError::Io { .. }), "{err}");
    assert_names(&err, dir.path(), INDEX_FILE);
}

#[test]
fn unsupported_dtype_names_file_and_tensor() {
    let dir = TempDir::new("st-dtype");
    let path = dir.join("m.safetensors");
    let ids: Vec<u8> = [0i64, 1, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(
        &path,
        build(&[
            ("position_ids", "I64", vec![3], ids),
            ("w", "F32", vec![1], f32_bytes(&[1.0])),
        ]),
    )
    .unwrap();
    let m = SafetensorsModel::open(&path).unwrap();
    assert!(m.has("position_ids"));
    assert_eq!(m.tensor("w").unwrap().to_f32_vec().unwrap(), [1.0]);
    let err = m.tensor("position_ids").unwrap_err();
    assert!(matches!(err, FormatError::UnsupportedType { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: tensor 'position_ids' has unsupported type I64",
            path.display()
        )
    );

    // A dtype string that safetensors itself does not define fails at open.
    std::fs::write(&path, build(&[("z", "Q4", vec![1], vec![0])])).unwrap();
    let err = SafetensorsModel::open(&path).unwrap_err();
    assert!(matches!(err, FormatError::UnsupportedType { .. }), "{err}");
    assert_names(&err, &path, "tensor 'z' has unsupported type Q4");
}

#[test]
fn out_of_bounds_and_inconsistent_offsets() {
    let dir = TempDir::new("st-oob");
    let path = dir.join("m.safetensors");
    let open = |bytes: Vec<u8>| {
        std::fs::write(&path, bytes).unwrap();
        SafetensorsModel::open(&path)
    };

    // Offsets run past the end of the file.
    let json = r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let err = open(build_raw(json, &[0u8; 8])).unwrap_err();
    match &err {
        FormatError::TensorOutOfBounds {
            offset,
            nbytes,
            file_len,
            ..
        } => assert_eq!(
            (*offset, *nbytes, *file_len),
            (8 + json.len() as u64, 16, 8 + json.len() as u64 + 8)
        ),
        e => panic!("unexpected {e}"),
    }
    assert_names(&err, &path, "tensor 'w' runs past the end of the file");

    // Huge offsets do not overflow.
    let json = r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551610,18446744073709551614]}}"#;
    let err = open(build_raw(json, &[0u8; 4])).unwrap_err();
    assert!(
        matches!(err, FormatError::TensorOutOfBounds { .. }),
        "{err}"
    );

    // Byte range disagrees with the shape.
    let json = r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}"#;
    let err = open(build_raw(json, &[0u8; 16])).unwrap_err();
    assert!(matches!(err, FormatError::InvalidTensor { .. }), "{err}");
    assert_names(&err, &path, "tensor 'w'");

    // Reversed offsets.
    let json = r#"{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}"#;
    let err = open(build_raw(json, &[0u8; 16])).unwrap_err();
    assert!(matches!(err, FormatError::InvalidTensor { .. }), "{err}");

    // Shape whose size overflows.
    let json = r#"{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#;
    let err = open(build_raw(json, &[0u8; 4])).unwrap_err();
    assert!(matches!(err, FormatError::InvalidTensor { .. }), "{err}");

    // Header length beyond the file, absurd header length, short file, bad JSON, bad entry.
    let mut bytes = 1000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let err = open(bytes).unwrap_err();
    assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
    assert_names(&err, &path, "header");
    let err = open(u64::MAX.to_le_bytes().to_vec()).unwrap_err();
    assert!(matches!(err, FormatError::Malformed { .. }), "{err}");
    let err = open(vec![1, 2, 3]).unwrap_err();
    assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
    let err = open(build_raw("{\"w\": [", &[])).unwrap_err();
    assert!(matches!(err, FormatError::Json { .. }), "{err}");
    assert_names(&err, &path, "invalid JSON");
    let err = open(build_raw(r#"{"w":{"dtype":"F32"}}"#, &[])).unwrap_err();
    assert!(matches!(err, FormatError::Json { .. }), "{err}");
    assert_names(&err, &path, "tensor 'w'");
}
