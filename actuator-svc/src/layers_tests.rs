//! The layering of `lib.rs`, checked on the sources by `cutover_testkit::layers`: each module
//! imports from the crate only what lies below it. The bottom layer, `lb`, is the crate
//! actuator-lb (`actuator-svc/lb/`, re-exported here as `crate::lb`): Cargo keeps it from
//! importing anything of this crate, and the table still says which modules may use it. The
//! table is this crate's; the checker is shared with the other service.

/// A module (a folder or a file under `src/`) and the top-level modules it may import; `lb` is
/// the crate actuator-lb.
const ALLOWED: &[(&str, &[&str])] = &[
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

/// The table sees `crate::lb`; a module naming `actuator_lb` itself would pass unseen, so only
/// `lib.rs` (the re-export) may.
#[test]
fn lb_is_named_only_through_the_re_export() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let wrong = cutover_testkit::layers::naming_outside_lib(&src, "actuator_lb");
    assert!(wrong.is_empty(), "name actuator_lb as crate::lb: {wrong:?}");
}
