//! The layering of `lib.rs`, checked on the sources by `cutover_testkit::layers`: each module
//! imports from the crate only what lies below it, and `lb` nothing at all (so it can become a
//! crate of its own). The table is this crate's; the checker is shared with the other service.

/// A module (a folder or a file under `src/`) and the top-level modules it may import.
const ALLOWED: &[(&str, &[&str])] = &[
    ("lb", &[]),
    ("identity.rs", &[]),
    ("config/azure_json.rs", &[]),
    ("metrics.rs", &["lb"]),
    ("arm", &["lb", "metrics"]),
    ("credentials.rs", &["arm", "config"]),
    ("plan", &["lb"]),
    ("state", &["lb", "metrics"]),
    ("writer", &["arm", "lb", "metrics", "plan", "state"]),
    (
        "inbound",
        &["arm", "identity", "lb", "metrics", "plan", "state"],
    ),
    ("grpc", &["identity", "inbound", "metrics"]),
];

#[test]
fn no_import_runs_back_up_a_layer() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    cutover_testkit::layers::check(&src, ALLOWED);
}
