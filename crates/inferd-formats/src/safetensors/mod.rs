//! Safetensors models: one `model.safetensors`, or shards listed by
//! `model.safetensors.index.json`. Each file is memory-mapped; tensors are
//! zero-copy views. inferd reads F32, F16 and BF16 tensors; tensors of other
//! (known) dtypes are listed but reading them gives `UnsupportedType`.

mod header;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::bytes::FileBytes;
use crate::{DType, FormatError, Result, TensorSource, TensorView};
use header::Entry;

pub const SINGLE_FILE: &str = "model.safetensors";
pub const INDEX_FILE: &str = "model.safetensors.index.json";

struct Shard {
    path: PathBuf,
    bytes: FileBytes,
}

/// A tensor together with the shard that holds it.
struct Located {
    entry: Entry,
    shard: usize,
}

/// An open, validated safetensors model (single file or sharded).
pub struct SafetensorsModel {
    /// What was opened: the directory, the single file or the index file.
    path: PathBuf,
    shards: Vec<Shard>,
    /// Shard order, then data order.
    tensors: Vec<Located>,
    index: HashMap<String, usize>,
    /// `__metadata__` of every shard merged (first shard wins).
    metadata: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct IndexJson {
    weight_map: BTreeMap<String, String>,
}

impl SafetensorsModel {
    /// Opens `path`: a directory holding `model.safetensors.index.json` or
    /// `model.safetensors`, an index file (`*.index.json`), or one file.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsModel> {
        let path = path.as_ref();
        if path.is_dir() {
            let index = path.join(INDEX_FILE);
            if index.is_file() {
                return Self::open_sharded(path, &index);
            }
            let single = path.join(SINGLE_FILE);
            if single.is_file() {
                return Self::open_files(path, vec![single]);
            }
            return Err(FormatError::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("directory has neither {SINGLE_FILE} nor {INDEX_FILE}"),
                ),
            ));
        }
        let is_index = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".index.json"));
        if is_index {
            return Self::open_sharded(path, path);
        }
        Self::open_files(path, vec![path.to_path_buf()])
    }

    fn open_sharded(opened: &Path, index_path: &Path) -> Result<SafetensorsModel> {
        let dir = index_path.parent().unwrap_or(Path::new("."));
        let text = std::fs::read(index_path).map_err(|e| FormatError::io(index_path, e))?;
        let index: IndexJson = serde_json::from_slice(&text).map_err(|e| FormatError::Json {
            path: index_path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut files: Vec<&str> = Vec::new();
        for (tensor, file) in &index.weight_map {
            let plain =
                !file.is_empty() && file != "." && file != ".." && !file.contains(['/', '\\']);
            if !plain {
                return Err(FormatError::malformed(
                    index_path,
                    format!(
                        "tensor '{tensor}' maps to shard {file:?}, which is not a plain file name"
                    ),
                ));
            }
            if !files.contains(&file.as_str()) {
                files.push(file);
            }
        }
        files.sort_unstable();
        let shard_paths = files.iter().map(|f| dir.join(f)).collect();
        let model = Self::open_files(opened, shard_paths)?;
        for (tensor, file) in &index.weight_map {
            let shard_path = dir.join(file);
            let found = model
                .index
                .get(tensor)
                .map(|&i| &model.shards[model.tensors[i].shard].path);
            if found != Some(&shard_path) {
                return Err(FormatError::MissingTensor {
                    path: shard_path,
                    tensor: tensor.clone(),
                });
            }
        }
        Ok(model)
    }

    fn open_files(opened: &Path, shard_paths: Vec<PathBuf>) -> Result<SafetensorsModel> {
        let mut shards = Vec::with_capacity(shard_paths.len());
        let mut tensors: Vec<Located> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut metadata = BTreeMap::new();
        for (si, path) in shard_paths.into_iter().enumerate() {
            let bytes = FileBytes::map(&path)?;
            let header = header::parse(&bytes, &path)?;
            for (k, v) in header.metadata {
                metadata.entry(k).or_insert(v);
            }
            for entry in header.entries {
                if let Some(&prev) = index.get(&entry.name) {
                    let prev_shard = shards.get(tensors[prev].shard);
                    let prev_path = prev_shard.map_or(path.as_path(), |s: &Shard| &s.path);
                    return Err(FormatError::invalid_tensor(
                        &path,
                        &entry.name,
                        format!("also present in {}", prev_path.display()),
                    ));
                }
                index.insert(entry.name.clone(), tensors.len());
                tensors.push(Located { entry, shard: si });
            }
            shards.push(Shard { path, bytes });
        }
        Ok(SafetensorsModel {
            path: opened.to_path_buf(),
            shards,
            tensors,
            index,
            metadata,
        })
    }

    /// What was opened: the directory, the index file or the single file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The files holding the tensors, in load order.
    pub fn shard_paths(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }

    /// The `__metadata__` string maps of all shards merged.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// Whether a tensor called `name` exists (whatever its dtype).
    pub fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// A zero-copy view of tensor `name`. `MissingTensor` naming the model
    /// path when absent; `UnsupportedType` naming the shard file and tensor
    /// when its dtype is not F32/F16/BF16.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let located = self
            .index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| FormatError::MissingTensor {
                path: self.path.clone(),
                tensor: name.to_string(),
            })?;
        let shard = &self.shards[located.shard];
        let e = &located.entry;
        let dtype: DType = match &e.dtype {
            Ok(d) => *d,
            Err(s) => {
                return Err(FormatError::UnsupportedType {
                    path: shard.path.clone(),
                    tensor: e.name.clone(),
                    dtype: s.clone(),
                })
            }
        };
        Ok(TensorView {
            name: &e.name,
            dtype,
            shape: &e.shape,
            // In bounds: checked when the shard was opened.
            data: &shard.bytes[e.start..e.start + e.nbytes],
            file: &shard.path,
        })
    }
}

impl TensorSource for SafetensorsModel {
    fn path(&self) -> &Path {
        &self.path
    }

    fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        SafetensorsModel::tensor(self, name)
    }

    fn has(&self, name: &str) -> bool {
        SafetensorsModel::has(self, name)
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.entry.name.as_str()).collect()
    }
}

impl std::fmt::Debug for SafetensorsModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsModel")
            .field("path", &self.path)
            .field("shards", &self.shards.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}
