// Empty on purpose: cargo only resolves a package's [build-dependencies] (and so unifies their
// features into every build script and proc-macro of the workspace) when it has a build script.
fn main() {}
