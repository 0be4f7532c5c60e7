//! The layering of `lib.rs`, checked on the sources: each module imports from the crate only
//! what lies below it, and `lb` nothing at all (so it can become a crate of its own).

use std::path::Path;

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
    ("grpc", &["identity", "inbound", "metrics", "tls_reload"]),
];

/// The top-level modules a source text names through `crate::` (comments skipped).
fn imports(text: &str) -> Vec<String> {
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

fn sources(path: &Path, out: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for e in entries {
            sources(&e, out);
        }
    } else if path.extension().is_some_and(|x| x == "rs") {
        out.push(path.to_path_buf());
    }
}

#[test]
fn no_import_runs_back_up_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    for (module, allowed) in ALLOWED {
        let mut files = Vec::new();
        sources(&src.join(module), &mut files);
        assert!(!files.is_empty(), "{module}: no sources");
        let own = module.trim_end_matches(".rs").split('/').next().unwrap();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
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

#[test]
fn imports_are_read_from_paths_and_groups() {
    let text = "use crate::lb::index::Admin;\nuse crate::{arm, state::Store};\n// crate::grpc\nlet x = crate::metrics::Metrics::new();";
    assert_eq!(imports(text), ["lb", "arm", "state", "metrics"]);
}
