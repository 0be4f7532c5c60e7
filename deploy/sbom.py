#!/usr/bin/env python3
"""CycloneDX 1.5 SBOM of one cutover image, as deploy/images.sh builds it (docs/security.md).

Lists what the image holds:
  - the crates compiled into the binary: the package's normal (not build, not dev) dependency
    graph from `cargo metadata` for the build's platform, each with its version, license
    expression, purl (crates.io) and the SHA-256 Cargo.lock records for its .crate file; proc
    macros run at build time only and are listed with scope "excluded";
  - the Debian packages of the shared libraries copied from the build host (`--lib`, the paths
    `ldd` names) and of the CA bundle, found with dpkg, each with its version and purl.
The dependency graph of the crates is included. Deterministic: the same inputs give the same
bytes (the timestamp is SOURCE_DATE_EPOCH, the serial number a UUID derived from the content),
so images.sh's digests stay reproducible.

Usage: deploy/sbom.py --bin signal-svc [--lib /lib/x86_64-linux-gnu/libc.so.6 ...]
                      [--ca-bundle /etc/ssl/certs/ca-certificates.crt] [--image cutover/signal-svc]
Writes the JSON to stdout. Needs cargo (and dpkg-query for the libraries; without dpkg the
libraries are listed by file name only). Python 3 standard library only.
"""

import argparse
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import uuid


def run(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout


def host_triple():
    for line in run(["rustc", "-vV"]).splitlines():
        if line.startswith("host: "):
            return line[len("host: "):].strip()
    sys.exit("sbom.py: rustc -vV names no host")


def lock_checksums(root):
    """(name, version) -> sha256 of the .crate, from Cargo.lock."""
    text = open(os.path.join(root, "Cargo.lock"), encoding="utf-8").read()
    out = {}
    for block in text.split("[[package]]")[1:]:
        fields = dict(re.findall(r'^(\w+) = "([^"]*)"', block, re.M))
        if "checksum" in fields:
            out[(fields["name"], fields["version"])] = fields["checksum"]
    return out


def crates(binary, root):
    meta = json.loads(
        run(
            [
                "cargo", "metadata", "--format-version", "1", "--locked",
                "--filter-platform", host_triple(),
            ],
            cwd=root,
        )
    )
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    members = set(meta["workspace_members"])
    start = [i for i in members if packages[i]["name"] == binary]
    if len(start) != 1:
        sys.exit(f"sbom.py: no workspace package named {binary}")
    # Normal dependencies only: build scripts and dev-dependencies are not in the binary.
    graph, todo = {}, [start[0]]
    while todo:
        pid = todo.pop()
        if pid in graph:
            continue
        deps = sorted(
            {
                d["pkg"]
                for d in nodes[pid]["deps"]
                if any(k["kind"] is None for k in d["dep_kinds"])
            }
        )
        graph[pid] = deps
        todo.extend(deps)
    return start[0], packages, members, graph


def bom_ref(p):
    return f"{p['name']}@{p['version']}"


def crate_component(p, local, checksums):
    c = {
        "type": "library",
        "bom-ref": bom_ref(p),
        "name": p["name"],
        "version": p["version"],
    }
    if p.get("license"):
        # SPDX expressions; the old "A/B" form means "A OR B".
        c["licenses"] = [{"expression": p["license"].replace("/", " OR ")}]
    if local:
        c["description"] = "this workspace's own crate"
    else:
        c["purl"] = f"pkg:cargo/{p['name']}@{p['version']}"
        digest = checksums.get((p["name"], p["version"]))
        if digest:
            c["hashes"] = [{"alg": "SHA-256", "content": digest}]
    if all("proc-macro" in t["kind"] for t in p["targets"]):
        c["scope"] = "excluded"  # runs in the compiler, not in the image
    return c


def dpkg_owner(path):
    """The Debian package that owns `path` (merged /usr or not), or None."""
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/usr/"):
            candidates.append(p[len("/usr"):])
        else:
            candidates.append("/usr" + p)
    for p in candidates:
        try:
            out = run(["dpkg-query", "-S", p])
        except (OSError, subprocess.CalledProcessError):
            continue
        return out.split(":", 1)[0].strip()
    return None


def deb_component(package):
    try:
        version, arch = run(
            ["dpkg-query", "-W", "-f", "${Version} ${Architecture}", package]
        ).split()
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None
    return {
        "type": "library",
        "bom-ref": f"deb:{package}@{version}",
        "name": package,
        "version": version,
        "purl": f"pkg:deb/debian/{package}@{version}?arch={arch}",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the workspace binary package")
    ap.add_argument("--image", help="the image name (default cutover/<bin>)")
    ap.add_argument("--lib", action="append", default=[], help="a shared library copied in")
    ap.add_argument("--ca-bundle", help="the CA bundle copied in")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    start, packages, members, graph = crates(args.bin, root)
    checksums = lock_checksums(root)
    top = packages[start]
    components = [
        crate_component(packages[i], i in members, checksums) for i in graph if i != start
    ]
    dependencies = [
        {"ref": bom_ref(packages[i]), "dependsOn": [bom_ref(packages[d]) for d in deps]}
        for i, deps in graph.items()
    ]

    debs = {}
    files = list(args.lib) + ([args.ca_bundle] if args.ca_bundle else [])
    for f in files:
        owner = dpkg_owner(f)
        if owner is None and f == args.ca_bundle:
            owner = "ca-certificates"  # generated by update-ca-certificates, owned by none
        c = deb_component(owner) if owner else None
        if c is None:
            c = {"type": "file", "bom-ref": f"file:{f}", "name": f}
        debs[c["bom-ref"]] = c
    components += debs.values()
    components.sort(key=lambda c: c["bom-ref"])
    dependencies.sort(key=lambda d: d["ref"])

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    stamp = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "cutover deploy/sbom.py"}]},
            "component": {
                "type": "container",
                "bom-ref": args.image or f"cutover/{args.bin}",
                "name": args.image or f"cutover/{args.bin}",
                "version": top["version"],
                "components": [
                    {
                        "type": "application",
                        "bom-ref": bom_ref(top),
                        "name": top["name"],
                        "version": top["version"],
                        "licenses": [{"expression": top.get("license") or "NOASSERTION"}],
                    }
                ],
            },
        },
        "components": components,
        "dependencies": dependencies,
    }
    body = json.dumps(bom, sort_keys=True, indent=1)
    serial = uuid.UUID(bytes=hashlib.sha256(body.encode()).digest()[:16], version=5)
    bom["serialNumber"] = f"urn:uuid:{serial}"
    sys.stdout.write(json.dumps(bom, indent=1, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()
