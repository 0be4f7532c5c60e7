//! A crate's layering, checked on its sources: each module (a folder or a file under `src/`)
//! imports from the crate only the top-level modules its row of the layer table allows. Each
//! service keeps its own table in `src/layers_tests.rs` and calls [`check`].

use std::path::{Path, PathBuf};

/// A module (a folder or a file under `src/`, e.g. `core`, `metrics.rs`, `config/azure_json.rs`)
/// and the top-level modules it may import.
pub type Layers<'a> = &'a [(&'a str, &'a [&'a str])];

/// Panics listing every import under `src` that a row of `allowed` does not allow (a module
/// may always import itself), or a row that names no sources.
pub fn check(src: &Path, allowed: Layers<'_>) {
    let mut wrong = Vec::new();
    for (module, allowed) in allowed {
        let mut files = Vec::new();
        sources(&src.join(module), &mut files);
        assert!(!files.is_empty(), "{module}: no sources");
        let own = module
            .trim_end_matches(".rs")
            .split('/')
            .next()
            .unwrap_or_default();
        for file in files {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            for name in imports(&text) {
                if name != own && !allowed.contains(&name.as_str()) {
                    wrong.push(format!("{} imports crate::{name}", file.display()));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run back up:\n{}",
        wrong.join("\n")
    );
}

/// The top-level modules a source text names through `crate::` (comments skipped).
pub fn imports(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a, b::c}` on one line (rustfmt keeps crate-level groups short).
                let end = group.find('}').unwrap_or(group.len());
                for part in group[..end].split(',') {
                    let name: String = part
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        out.push(name);
                    }
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push(name);
            }
        }
    }
    out
}

fn sources(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
            .map(|e| {
                e.unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
                    .path()
            })
            .collect();
        entries.sort();
        for e in entries {
            sources(&e, out);
        }
    } else if path.extension().is_some_and(|x| x == "rs") {
        out.push(path.to_path_buf());
    }
}

/// The files under `src` other than `lib.rs` and `layers_tests.rs` that name `crate_name`: a
/// crate re-exported as a module (`pub use signal_core as core;`) is seen by [`check`] only
/// as `crate::<module>`, so it must not be named directly anywhere else.
pub fn naming_outside_lib(src: &Path, crate_name: &str) -> Vec<String> {
    fn visit(path: &Path, crate_name: &str, found: &mut Vec<String>) {
        if path.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .filter_map(Result::ok)
                .map(|e| e.path())
                .collect();
            entries.sort();
            for p in entries {
                visit(&p, crate_name, found);
            }
        } else if path.extension().is_some_and(|x| x == "rs")
            && !path.ends_with("src/lib.rs")
            && !path.ends_with("src/layers_tests.rs")
            && std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .contains(crate_name)
        {
            found.push(path.display().to_string());
        }
    }
    let mut found = Vec::new();
    visit(src, crate_name, &mut found);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_read_from_paths_and_groups() {
        let text = "use crate::core::index::Output;\nuse crate::{admin, shared::Shared};\n// crate::stream\nlet x = crate::metrics::Metrics::new();";
        assert_eq!(imports(text), ["core", "admin", "shared", "metrics"]);
        let text = "use crate::lb::index::Admin;\nuse crate::{arm, state::Store};\n// crate::grpc\nlet x = crate::metrics::Metrics::new();";
        assert_eq!(imports(text), ["lb", "arm", "state", "metrics"]);
    }

    #[test]
    fn an_import_up_a_layer_is_named() {
        let src =
            std::env::temp_dir().join(format!("cutover-testkit-layers-{}", std::process::id()));
        std::fs::create_dir_all(src.join("core")).unwrap();
        std::fs::write(src.join("core/mod.rs"), "use crate::core::x;\n").unwrap();
        std::fs::write(src.join("top.rs"), "use crate::core::x;\n").unwrap();
        check(&src, &[("core", &[]), ("top.rs", &["core"])]);
        std::fs::write(src.join("core/mod.rs"), "use crate::top::y;\n").unwrap();
        let err = std::panic::catch_unwind(|| check(&src, &[("core", &[])])).unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(msg.contains("core/mod.rs imports crate::top"), "{msg}");
        std::fs::remove_dir_all(&src).unwrap();
    }

    #[test]
    fn a_re_exported_crate_named_outside_lib_is_found() {
        let src =
            std::env::temp_dir().join(format!("cutover-testkit-naming-{}", std::process::id()));
        std::fs::create_dir_all(src.join("src/writers")).unwrap();
        std::fs::write(src.join("src/lib.rs"), "pub use signal_core as core;\n").unwrap();
        std::fs::write(src.join("src/writers/gate.rs"), "use crate::core::gate;\n").unwrap();
        assert!(naming_outside_lib(&src.join("src"), "signal_core").is_empty());
        std::fs::write(src.join("src/writers/gate.rs"), "use signal_core::gate;\n").unwrap();
        let found = naming_outside_lib(&src.join("src"), "signal_core");
        assert_eq!(found.len(), 1);
        assert!(found[0].ends_with("writers/gate.rs"), "{found:?}");
        std::fs::remove_dir_all(&src).unwrap();
    }
}
