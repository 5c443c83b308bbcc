//! Backend boundary, CPU backend, KV layout and model architectures.
