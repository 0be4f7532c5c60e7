//! libFuzzer entry point: `CUTOVER_FUZZ_TARGET=<name>` picks the target (see
//! `cutover_fuzz::TARGETS`); build and run with tests/fuzz/run.sh.

#![no_main]

use std::sync::OnceLock;

fn selected() -> cutover_fuzz::Target {
    static TARGET: OnceLock<cutover_fuzz::Target> = OnceLock::new();
    *TARGET.get_or_init(|| {
        let name = std::env::var("CUTOVER_FUZZ_TARGET").unwrap_or_default();
        cutover_fuzz::target(&name).unwrap_or_else(|| {
            eprintln!(
                "set CUTOVER_FUZZ_TARGET to one of {:?}",
                cutover_fuzz::TARGETS
                    .iter()
                    .map(|t| t.0)
                    .collect::<Vec<_>>()
            );
            std::process::exit(2)
        })
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| selected()(data));
