//! The layering of `lib.rs`, checked on the sources by `cutover_testkit::layers`: each module
//! imports from the crate only what lies below it. The bottom layer, `core`, is the crate
//! signal-core (`signal-svc/core/`, re-exported here as `crate::core`): Cargo keeps it from
//! importing anything of this crate, and the table still says which modules may use it. The
//! table is this crate's; the checker is shared with the other service.

/// A module (a folder or a file under `src/`) and the top-level modules it may import,
/// bottom up: `core` (pure, the crate signal-core), support (`config_error`, `tls_reload`,
/// `config`, `metrics`), `shared`, `writers`, then `k8s` and `leadership`, then `stream`;
/// `runtime.rs` wires them all and is not listed.
const ALLOWED: &[(&str, &[&str])] = &[
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

/// The table sees `crate::core`; a module naming `signal_core` itself would pass unseen, so only
/// `lib.rs` (the re-export) may.
#[test]
fn core_is_named_only_through_the_re_export() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let wrong = cutover_testkit::layers::naming_outside_lib(&src, "signal_core");
    assert!(
        wrong.is_empty(),
        "name signal_core as crate::core: {wrong:?}"
    );
}
