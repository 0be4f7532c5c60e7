//! A coverage-less mutation driver: starts from the seeds and applies random byte-level and
//! token-level mutations (flips, inserts, deletes, splices, duplicated ranges, interesting
//! tokens such as quotes, braces, huge numbers and escape characters). It finds what random
//! mutation near real inputs finds; libFuzzer (`run.sh`) adds coverage guidance.

use crate::Target;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

const TOKENS: &[&[u8]] = &[
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"null",
    b"true",
    b"-",
    b"0",
    b"1e999",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"\\u0000",
    b"\\ud800",
    b"\x1b[2J",
    b"\x00",
    b"\n",
    b"\xff",
    b"\xc3",
    b"GMT",
    b"Scheduled:",
    b"Preempt Scheduled:",
    b"/",
    b"azure:///subscriptions/",
    b"/virtualMachines/",
    b"/virtualMachineScaleSets/",
    b"/networkInterfaces/",
    b"/ipConfigurations/",
    b"resourceGroups",
    b"::",
    b"31 Dec 9999",
    b"\"value\"",
    b"\"properties\"",
    b"\"error\"",
    b"\"details\"",
    b"\"status\"",
];

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub executions: u64,
    /// The first input that panicked, if any.
    pub crash: Option<Vec<u8>>,
}

fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, pool: &[Vec<u8>]) {
    let rounds = 1 + rng.gen_range(0..4);
    for _ in 0..rounds {
        let len = input.len();
        match rng.gen_range(0..8) {
            0 if len > 0 => {
                let i = rng.gen_range(0..len);
                input[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.gen_range(0..len);
                input[i] = rng.r#gen();
            }
            2 if len > 0 => {
                let a = rng.gen_range(0..len);
                let b = (a + rng.gen_range(1..=16)).min(len);
                input.drain(a..b);
            }
            3 => {
                let t = TOKENS[rng.gen_range(0..TOKENS.len())];
                let i = rng.gen_range(0..=len);
                input.splice(i..i, t.iter().copied());
            }
            4 if len > 0 => {
                // Duplicate a range: deep nesting, long strings, repeated fields.
                let a = rng.gen_range(0..len);
                let b = (a + rng.gen_range(1..=64)).min(len);
                let chunk = input[a..b].to_vec();
                for _ in 0..rng.gen_range(1..8) {
                    input.splice(a..a, chunk.iter().copied());
                }
            }
            5 if !pool.is_empty() => {
                // Splice in part of another input.
                let other = &pool[rng.gen_range(0..pool.len())];
                if !other.is_empty() {
                    let a = rng.gen_range(0..other.len());
                    let b = (a + rng.gen_range(1..=64)).min(other.len());
                    let i = rng.gen_range(0..=len);
                    input.splice(i..i, other[a..b].iter().copied());
                }
            }
            6 if len > 0 => input.truncate(rng.gen_range(0..len)),
            _ => {
                let i = rng.gen_range(0..=len);
                input.insert(i, rng.r#gen());
            }
        }
    }
    input.truncate(64 * 1024);
}

/// Runs `target` on the seeds, then on mutations, until `budget` has passed or `max_execs`
/// inputs were tried; stops at the first panic.
pub fn run(
    target: Target,
    seeds: &[Vec<u8>],
    budget: Duration,
    max_execs: u64,
    seed: u64,
) -> Report {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pool: Vec<Vec<u8>> = seeds.to_vec();
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    let start = Instant::now();
    let mut executions = 0;
    let attempt = |input: &[u8]| catch_unwind(AssertUnwindSafe(|| target(input))).is_ok();
    for s in seeds {
        executions += 1;
        if !attempt(s) {
            return Report {
                executions,
                crash: Some(s.clone()),
            };
        }
    }
    while executions < max_execs && start.elapsed() < budget {
        let mut input = pool[rng.gen_range(0..pool.len())].clone();
        mutate(&mut rng, &mut input, &pool);
        executions += 1;
        if !attempt(&input) {
            return Report {
                executions,
                crash: Some(input),
            };
        }
        // Keep some mutants as new starting points (a crude stand-in for coverage feedback).
        if rng.gen_ratio(1, 64) && pool.len() < 256 {
            pool.push(input);
        }
    }
    Report {
        executions,
        crash: None,
    }
}
