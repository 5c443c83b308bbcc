//! Engine logic with no tensors and no IO.
