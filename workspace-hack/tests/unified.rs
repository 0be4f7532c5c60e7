//! Every selection of packages builds each shared dependency with the same features.
//!
//! `cargo tree` prints the features cargo resolves for a selection; this test compares, for every
//! dependency that a non-test build can use, the features resolved for each member alone (with
//! and without its dev-dependencies) with those of the whole workspace with its tests. A
//! difference means a rebuild when switching between, say, `cargo test --workspace` and the
//! tests' nested `cargo build -p actuator-svc --bin actuator-svc`; the failure prints the
//! sections of `workspace-hack/Cargo.toml` that make it go away, and
//! `CUTOVER_BLESS=1 cargo test -p cutover-workspace-hack --test unified` writes them. It runs
//! `cargo tree` only: no build.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

/// A dependency as cargo compiles it: build scripts and proc-macros and everything they use are
/// compiled for the host, with features unified separately from the rest.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    name: String,
    version: String,
    host: bool,
}

/// The features resolved per dependency in one selection.
type Resolved = BTreeMap<Key, BTreeSet<String>>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn cargo_tree(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["tree", "--offline", "--charset", "utf8"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn members() -> BTreeSet<String> {
    cargo_tree(&[
        "--workspace",
        "--depth",
        "0",
        "--prefix",
        "none",
        "-f",
        "{p}",
    ])
    .lines()
    .filter_map(|l| l.split_whitespace().next())
    .map(str::to_string)
    .collect()
}

/// The width of one level of `cargo tree`'s indentation, and the shapes it takes.
const LEVEL: usize = 4;
const LEVELS: [[char; LEVEL]; 4] = [
    ['├', '─', '─', ' '],
    ['└', '─', '─', ' '],
    ['│', ' ', ' ', ' '],
    [' ', ' ', ' ', ' '],
];

/// The dependencies of `cargo tree -f '{p}|{f}'` output (members left out), each marked host
/// or target by the path that reaches it: under a proc-macro or a `[build-dependencies]`
/// heading everything is compiled for the host.
fn parse(text: &str, members: &BTreeSet<String>) -> Resolved {
    let mut resolved = Resolved::new();
    // Per depth: whether the node there is compiled for the host, and whether its children
    // listed so far are build-dependencies.
    let mut host_at: Vec<bool> = Vec::new();
    let mut build_section: Vec<bool> = Vec::new();
    for line in text.lines() {
        let chars: Vec<char> = line.chars().collect();
        let mut depth = 0;
        while chars
            .get(depth * LEVEL..(depth + 1) * LEVEL)
            .is_some_and(|c| LEVELS.iter().any(|l| l == c))
        {
            depth += 1;
        }
        let rest: String = chars[(depth * LEVEL).min(chars.len())..].iter().collect();
        let rest = rest.trim();
        if rest.is_empty() {
            continue;
        }
        if let Some(heading) = rest.strip_prefix('[') {
            // `[build-dependencies]` or `[dev-dependencies]` of the node at `depth`.
            build_section.truncate(depth);
            build_section.resize(depth + 1, false);
            build_section[depth] = heading.starts_with("build-dependencies");
            continue;
        }
        let (package, features) = rest.split_once('|').unwrap();
        let mut words = package.split_whitespace();
        let name = words.next().unwrap().to_string();
        let version = words.next().unwrap().trim_start_matches('v').to_string();
        let proc_macro = package.contains("(proc-macro)");
        let host = proc_macro || (depth > 0 && (host_at[depth - 1] || build_section[depth - 1]));
        host_at.truncate(depth);
        host_at.push(host);
        build_section.truncate(depth);
        build_section.push(false);
        if members.contains(&name) {
            continue;
        }
        let features = features.trim().trim_end_matches("(*)").trim().to_string();
        resolved
            .entry(Key {
                name,
                version,
                host,
            })
            .or_default()
            .insert(features);
    }
    resolved
}

/// What cargo resolves for `selection`, with or without dev-dependencies (a test or a build).
fn resolve(selection: &[&str], dev: bool, members: &BTreeSet<String>) -> Resolved {
    let edges = if dev {
        "normal,build,dev"
    } else {
        "normal,build"
    };
    let mut args = vec!["-e", edges, "-f", "{p}|{f}"];
    args.extend_from_slice(selection);
    parse(&cargo_tree(&args), members)
}

/// The entries of workspace-hack/Cargo.toml: `(name, version, host)` per line of
/// `[dependencies]` (target) and `[build-dependencies]` (host).
fn pinned() -> BTreeSet<Key> {
    let text = std::fs::read_to_string(root().join("workspace-hack/Cargo.toml")).unwrap();
    let mut host = None;
    let mut out = BTreeSet::new();
    let value = |line: &str, field: &str| {
        let at = line.find(&format!("{field} = \""))? + field.len() + 4;
        Some(line[at..].split('"').next()?.to_string())
    };
    for line in text.lines() {
        if line.starts_with('[') {
            host = match line.trim() {
                "[dependencies]" => Some(false),
                "[build-dependencies]" => Some(true),
                _ => None,
            };
            continue;
        }
        let (Some(host), Some((key, _))) = (host, line.split_once(" = {")) else {
            continue;
        };
        out.insert(Key {
            name: value(line, "package").unwrap_or_else(|| key.trim().to_string()),
            version: value(line, "version").unwrap(),
            host,
        });
    }
    out
}

/// The section of workspace-hack/Cargo.toml that pins `entries` to their features.
fn section(entries: &BTreeMap<&Key, &BTreeSet<String>>) -> String {
    let mut versions: BTreeMap<&str, usize> = BTreeMap::new();
    for key in entries.keys() {
        *versions.entry(&key.name).or_default() += 1;
    }
    let mut lines = Vec::new();
    for (key, features) in entries {
        let list: Vec<String> = features
            .iter()
            .flat_map(|f| f.split(','))
            .filter(|f| !f.is_empty())
            .map(|f| format!("\"{f}\""))
            .collect();
        // Two versions of one crate need two names.
        let name = if versions[key.name.as_str()] > 1 {
            let major = key.version.split('.').take(2).collect::<Vec<_>>().join("_");
            format!("{}-{major} = {{ package = \"{}\",", key.name, key.name)
        } else {
            format!("{} = {{", key.name)
        };
        lines.push(format!(
            "{name} version = \"{}\", default-features = false, features = [{}] }}",
            key.version,
            list.join(", ")
        ));
    }
    lines.join("\n")
}

/// The member left out of the unification: the whole-service simulation runs the services on
/// turmoil, which needs tokio's `test-util` (paused runtimes). Pinning that here would ship it
/// in both images; instead a build that includes tests/dst (the full suite, `cargo test
/// --workspace`) compiles tokio and what sits on it once more, and every other selection,
/// the images' included, stays without it.
const OUTSIDE: &str = "cutover-dst";

#[test]
fn every_selection_of_packages_builds_shared_dependencies_with_the_same_features() {
    let members = members();
    assert!(members.contains("cutover-e2e") && members.contains("actuator-svc"));
    let workspace = ["--workspace", "--exclude", OUTSIDE];
    let whole = resolve(&workspace, true, &members);
    // Dependencies only tests use are never shared with a nested build of a binary; pinning
    // them here would make every release build compile them.
    let built = resolve(&workspace, false, &members);
    let pinned = pinned();

    let mut problems = Vec::new();
    for key in pinned.iter().filter(|k| !whole.contains_key(k)) {
        problems.push(format!(
            "workspace-hack pins {} {} ({}), which Cargo.lock no longer resolves there",
            key.name,
            key.version,
            side(key)
        ));
    }
    let mut wanted: BTreeSet<Key> = pinned
        .iter()
        .filter(|k| whole.contains_key(k))
        .cloned()
        .collect();
    for member in members.iter().filter(|m| *m != OUTSIDE) {
        for dev in [false, true] {
            for (key, features) in resolve(&["-p", member], dev, &members) {
                if !built.contains_key(&key) {
                    continue;
                }
                let union = whole.get(&key).unwrap();
                if &features != union {
                    problems.push(format!(
                        "cargo {} -p {member}: {} {} ({}) gets {:?}, the workspace {:?}",
                        if dev { "test" } else { "build" },
                        key.name,
                        key.version,
                        side(&key),
                        features,
                        union
                    ));
                    wanted.insert(key);
                }
            }
        }
    }
    let entries = |host: bool| {
        section(
            &wanted
                .iter()
                .filter(|k| k.host == host)
                .map(|k| (k, &whole[k]))
                .collect(),
        )
    };
    if problems.is_empty() {
        return;
    }
    let (target, host) = (entries(false), entries(true));
    if std::env::var_os("CUTOVER_BLESS").is_some() {
        rewrite(&target, &host);
    }
    panic!(
        "shared dependencies resolve different features per selection, so switching selections \
         rebuilds them:\n{}\n\nThe two sections of workspace-hack/Cargo.toml that pin them \
         (`CUTOVER_BLESS=1 cargo test -p cutover-workspace-hack --test unified` writes them; \
         run it until it passes):\n[dependencies]\n{target}\n\n[build-dependencies]\n{host}\n",
        problems.join("\n"),
    );
}

/// Replaces the `[dependencies]` and `[build-dependencies]` sections of the hack's manifest.
fn rewrite(target: &str, host: &str) {
    let path = root().join("workspace-hack/Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let head = text.split("\n[dependencies]\n").next().unwrap();
    let tail = text.split("\n[lints]\n").nth(1).unwrap();
    let text = format!(
        "{head}\n[dependencies]\n{target}\n\n[build-dependencies]\n{host}\n\n[lints]\n{tail}"
    );
    std::fs::write(&path, text).unwrap();
}

fn side(key: &Key) -> &'static str {
    if key.host { "host" } else { "target" }
}

#[test]
fn every_member_depends_on_the_workspace_hack() {
    let members = members();
    let out = cargo_tree(&[
        "--workspace",
        "-e",
        "normal",
        "--depth",
        "1",
        "--no-dedupe",
        "--prefix",
        "depth",
        "-f",
        "{p}",
    ]);
    // Roots are at depth 0, their direct dependencies at depth 1.
    let mut current = String::new();
    let mut with_hack = BTreeSet::new();
    for line in out.lines() {
        if let Some(root) = line.strip_prefix('0') {
            current = root.split_whitespace().next().unwrap_or("").to_string();
        } else if line.starts_with("1cutover-workspace-hack ") {
            with_hack.insert(current.clone());
        }
    }
    let without: Vec<&String> = members
        .iter()
        .filter(|m| *m != "cutover-workspace-hack" && !with_hack.contains(*m))
        .collect();
    assert!(
        without.is_empty(),
        "members without `cutover-workspace-hack = {{ workspace = true }}` in [dependencies]: \
         {without:?}"
    );
}
