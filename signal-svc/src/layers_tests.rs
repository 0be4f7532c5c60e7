//! The layering of `lib.rs`, checked on the sources by `cutover_testkit::layers`: each module
//! imports from the crate only what lies below it, and `core` nothing at all (so it can become a
//! crate of its own). The table is this crate's; the checker is shared with the other service.

/// A module (a folder or a file under `src/`) and the top-level modules it may import,
/// bottom up: `core` (pure), support (`config_error`, `tls_reload`, `config`, `metrics`),
/// `shared`, `writers`, then `k8s` and `leadership`, then `stream`; `runtime.rs` wires them
/// all and is not listed.
const ALLOWED: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("config_error.rs", &[]),
    ("metrics.rs", &[]),
    ("tls_reload.rs", &[]),
    ("config.rs", &["config_error", "core"]),
    ("shared", &["core", "metrics"]),
    ("writers", &["core", "shared"]),
    ("k8s", &["core", "shared", "writers"]),
    ("leadership", &["core", "shared"]),
    (
        "stream",
        &["config", "core", "shared", "tls_reload", "writers"],
    ),
];

#[test]
fn no_import_runs_back_up_a_layer() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    cutover_testkit::layers::check(&src, ALLOWED);
}
