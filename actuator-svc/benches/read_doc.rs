//! What reading a load balancer costs the writer after each operation: `cargo bench -p
//! actuator-svc --bench read_doc` renders the `aks` preset's LBs with arm-sim at each size
//! (default 240 and 5,000 nodes; override with `READ_DOC_NODES=240,2000,5000`) and prints,
//! per LB, the time to find its state (the first bytes), to tokenize it whole (the floor of
//! any reader), and the writer's one pass that indexes its entries and compacts it into the
//! next write's base, against the same two as separate passes.
#![allow(clippy::unwrap_used)] // benchmark harness: a failure should abort loudly

use actuator_svc::lb::index::LbIndex;
use actuator_svc::lb::scan;
use actuator_svc::lb::splice;
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

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let sizes: Vec<usize> = std::env::var("READ_DOC_NODES")
        .unwrap_or_else(|_| "240,5000".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    println!(
        "| nodes | LB | document | base | state | tokenize | index + compact, one pass | two passes |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for nodes in sizes {
        let store = Seed::preset("aks", Some(nodes)).unwrap().build().unwrap();
        for s in store.subs.values() {
            for g in s.rgs.values() {
                for lb in g.lbs.values() {
                    let body = bytes::Bytes::from(lb.render_bytes(&s.id, &g.name));
                    let (state, st) = best(5, || scan::lb_state(&body).unwrap());
                    assert!(st.complete());
                    let (tokenize, _) = best(3, || scan::scan(&body, &mut ()).unwrap());
                    let (one, base) = best(3, || {
                        let mut c = splice::Compactor::new();
                        let index = LbIndex::read_also(&lb.name, "/lb", &body, &mut c).unwrap();
                        (index, c.finish(&body))
                    });
                    let (two, _) = best(3, || {
                        let index = LbIndex::read(&lb.name, "/lb", &body).unwrap();
                        (index, splice::compact(&body).unwrap())
                    });
                    println!(
                        "| {nodes} | {} | {:.2} MB | {:.2} MB | {} | {} | {} | {} |",
                        lb.name,
                        body.len() as f64 / 1e6,
                        base.1.len() as f64 / 1e6,
                        ms(state),
                        ms(tokenize),
                        ms(one),
                        ms(two),
                    );
                }
            }
        }
    }
}
