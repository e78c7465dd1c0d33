//! No code: this crate only depends on a few crates with features the
//! tests' own dependencies (a browser driver, a bench harness) turn on.
//!
//! Cargo builds a crate once per set of features. `cargo build -p bl-cli`
//! and `cargo test --workspace` resolve features over different dependency
//! graphs, so without this crate a shared crate deep in the tree (syn,
//! zerocopy, fnv) got two feature sets, and everything above it, wasmtime
//! and cranelift included, was compiled twice. bl-cli depends on this
//! crate, so both builds agree; `scripts/dev test` checks that they do.
//! (tokio's `test-util` is left to the tests: it is not for the bl that
//! ships.)
