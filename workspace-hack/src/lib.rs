//! Feature pinning for the workspace, in the manner of cargo-hakari's "workspace-hack".
//!
//! Cargo unifies a dependency's features over the packages and targets of one invocation, so
//! `cargo run --bin sandbox`, `cargo test --workspace` and the sandbox's and tests' nested
//! `cargo build -p <service> --bin <service>` would each build tokio, hyper-util, rustix, syn
//! and their dependants with a different feature set, rebuilding them on every switch. Every
//! member depends on this crate, whose Cargo.toml lists each such dependency with the union of
//! its features over the whole workspace (tests included): then every selection of packages
//! resolves the same features and a second invocation reuses the first one's builds.
//!
//! There is no code here. `tests/unified.rs` fails when the list is incomplete or stale;
//! `CUTOVER_BLESS=1 cargo test -p cutover-workspace-hack --test unified` rewrites it.
