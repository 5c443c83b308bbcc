//! CPU weight kernels (see Cargo.toml description).
