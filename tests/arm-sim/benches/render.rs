//! What one render of a load balancer costs the simulator: `cargo bench -p arm-sim --bench
//! render` builds the `aks` preset at each size (default 240 and 5,000 nodes; override with
//! `ARM_SIM_RENDER_NODES=240,2000,5000`) and prints, per LB, the document's size and the time
//! to write it (the GET body, rendered once per change), to parse it back (what a client
//! holding a tree would pay) and to apply it as a whole-LB PUT (the model built from a parsed
//! body: every entry matched to the stored one).
#![allow(clippy::unwrap_used)] // benchmark harness: a failure should abort loudly

use arm_sim::seed::Seed;
use std::time::{Duration, Instant};

/// The best of `n` runs: the figure least disturbed by the rest of the machine.
fn best<T>(n: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut out = None;
    let mut best = Duration::MAX;
    for _ in 0..n {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed());
        out = Some(v);
    }
    (best, out.unwrap())
}

fn main() {
    let sizes: Vec<usize> = std::env::var("ARM_SIM_RENDER_NODES")
        .unwrap_or_else(|_| "240,5000".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    println!("| nodes | LB | body | render | MB/s | parse (serde_json::Value) | apply as a PUT |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for nodes in sizes {
        let store = Seed::preset("aks", Some(nodes)).unwrap().build().unwrap();
        for s in store.subs.values() {
            for g in s.rgs.values() {
                for lb in g.lbs.values() {
                    let (render, body) = best(5, || lb.render_bytes(&s.id, &g.name));
                    let (parse, doc) = best(3, || {
                        serde_json::from_slice::<serde_json::Value>(&body).unwrap()
                    });
                    let (apply, _) = best(3, || {
                        arm_sim::body::lb_from_body(&lb.name, &doc, Some(lb), &lb.location).unwrap()
                    });
                    println!(
                        "| {nodes} | {} | {:.2} MB | {:.1} ms | {:.0} | {:.1} ms | {:.1} ms |",
                        lb.name,
                        body.len() as f64 / 1e6,
                        render.as_secs_f64() * 1e3,
                        body.len() as f64 / 1e6 / render.as_secs_f64(),
                        parse.as_secs_f64() * 1e3,
                        apply.as_secs_f64() * 1e3,
                    );
                }
            }
        }
    }
}
