//! `Model::identity`: the same files give the same fingerprint wherever they lie; any
//! other model, or a changed weight byte near either end, gives another.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use inferd_runtime::{CpuBackend, Model};

fn identity(path: &Path) -> String {
    Model::load(CpuBackend::new(), path).unwrap().identity()
}

fn fixture(name: &str) -> PathBuf {
    repo_root().join("fixtures/models").join(name)
}

/// A copy of fixture `name` in a fresh temporary directory.
fn copy_fixture(name: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("inferd-identity-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture(name).join(f), dir.join(f)).unwrap();
    }
    dir
}

#[test]
fn identity_is_stable_and_tells_models_apart() {
    let ids: Vec<String> = ["llama", "qwen2", "qwen3"]
        .iter()
        .map(|n| identity(&fixture(n)))
        .collect();
    for id in &ids {
        assert_eq!(id.len(), 64);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    }
    assert_ne!(ids[0], ids[1]);
    assert_ne!(ids[0], ids[2]);
    assert_ne!(ids[1], ids[2]);
    // the same files again, and a copy elsewhere
    assert_eq!(identity(&fixture("llama")), ids[0]);
    let copy = copy_fixture("llama", "copy");
    assert_eq!(identity(&copy), ids[0]);
    // one weight byte changed at the end of the file
    let st = copy.join("model.safetensors");
    let mut bytes = std::fs::read(&st).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&st, &bytes).unwrap();
    assert_ne!(identity(&copy), ids[0]);
    std::fs::remove_dir_all(&copy).unwrap();
}

#[test]
fn identity_of_real_gguf_is_stable() {
    let Some(path) = real_model("smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let a = identity(&path);
    assert_eq!(a, identity(&path));
    assert_ne!(a, identity(&fixture("llama")));
    eprintln!("smollm2 identity {a}");
}
