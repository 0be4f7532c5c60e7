//! Fails when `src/gen/` no longer matches what the `.proto` files generate.
//! `CUTOVER_BLESS=1 cargo test -p cutover-proto --test codegen` rewrites it.

use std::path::{Path, PathBuf};

const GENERATED: [&str; 2] = ["cutover.v1.rs", "cutover.v1.bin"];

fn generate(out: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path().expect("vendored protoc"));
    let well_known = protoc_bin_vendored::include_path().expect("vendored protoc includes");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .out_dir(out)
        .file_descriptor_set_path(out.join("cutover.v1.bin"))
        .emit_rerun_if_changed(false)
        .compile_with_config(
            config,
            &[root.join("cutover/v1/actuator.proto")],
            &[root.to_path_buf(), well_known],
        )
        .expect("protoc run");
}

#[test]
fn checked_in_code_matches_the_proto() {
    let fresh = tempfile::tempdir().unwrap();
    generate(fresh.path());
    let checked_in = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/gen");
    let bless = std::env::var_os("CUTOVER_BLESS").is_some();
    let mut drifted = Vec::new();
    for name in GENERATED {
        let want = std::fs::read(fresh.path().join(name)).unwrap();
        let have = std::fs::read(checked_in.join(name)).unwrap_or_default();
        if want != have {
            if bless {
                std::fs::write(checked_in.join(name), &want).unwrap();
            } else {
                drifted.push(name);
            }
        }
    }
    assert!(
        drifted.is_empty(),
        "generated code is stale: {drifted:?}; run `CUTOVER_BLESS=1 cargo test -p cutover-proto --test codegen`"
    );
}
