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
    fn visit(path: &std::path::Path, wrong: &mut Vec<String>) {
        if path.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                visit(&entry.unwrap().path(), wrong);
            }
        } else if path.extension().is_some_and(|x| x == "rs")
            && !path.ends_with("src/lib.rs")
            && !path.ends_with("src/layers_tests.rs")
            && std::fs::read_to_string(path)
                .unwrap()
                .contains("actuator_lb")
        {
            wrong.push(path.display().to_string());
        }
    }
    let mut wrong = Vec::new();
    visit(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut wrong,
    );
    assert!(wrong.is_empty(), "name actuator_lb as crate::lb: {wrong:?}");
}
