//! Rendezvous (highest-random-weight) hashing of names (load balancers) onto actuator
//! endpoints.
//!
//! Each name goes to the endpoint with the highest `score(endpoint, name)`. Adding or removing
//! an endpoint moves only the names that it wins or held (about 1/n of them), and every
//! replica of signal-svc computes the same assignment. The hash is fixed (FNV-1a + a
//! splitmix64 finaliser), never std's randomly keyed SipHash, so it is stable across processes.

/// The endpoint a name (a load balancer) goes to, or `None` without endpoints.
pub fn pick<'a>(node_name: &str, endpoints: &'a [String]) -> Option<&'a String> {
    endpoints.iter().max_by(|a, b| {
        score(a, node_name)
            .cmp(&score(b, node_name))
            // Deterministic tie-break: the smaller endpoint wins.
            .then_with(|| b.cmp(a))
    })
}

fn score(endpoint: &str, node: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in endpoint
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(node.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // splitmix64 finaliser: FNV alone clusters on similar inputs.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("aks-spot-12345678-vmss{i:06x}"))
            .collect()
    }
    fn eps(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{}:9443", i + 10)).collect()
    }

    #[test]
    fn empty_and_single() {
        assert_eq!(pick("n", &[]), None);
        let one = eps(1);
        assert_eq!(pick("n", &one), Some(&one[0]));
    }

    #[test]
    fn order_of_endpoints_does_not_matter() {
        let a = eps(5);
        let mut b = a.clone();
        b.reverse();
        for n in names(200) {
            assert_eq!(pick(&n, &a), pick(&n, &b));
        }
    }

    #[test]
    fn balanced_across_endpoints() {
        let e = eps(4);
        let mut count: HashMap<&String, usize> = HashMap::new();
        for n in names(4000) {
            *count.entry(pick(&n, &e).unwrap()).or_default() += 1;
        }
        for c in count.values() {
            assert!((800..1200).contains(c), "{count:?}");
        }
    }

    #[test]
    fn adding_an_endpoint_moves_about_one_in_n() {
        let before = eps(4);
        let after = eps(5);
        let all = names(5000);
        let moved: Vec<&String> = all
            .iter()
            .filter(|n| pick(n, &before) != pick(n, &after))
            .collect();
        // Expect ~1/5 = 1000; every moved node went to the new endpoint.
        assert!((800..1200).contains(&moved.len()), "{}", moved.len());
        for n in moved {
            assert_eq!(pick(n, &after), Some(&after[4]));
        }
    }

    #[test]
    fn removing_an_endpoint_moves_only_its_nodes() {
        let before = eps(5);
        let after: Vec<String> = before
            .iter()
            .filter(|e| **e != before[2])
            .cloned()
            .collect();
        for n in names(2000) {
            let b = pick(&n, &before).unwrap();
            if *b != before[2] {
                assert_eq!(pick(&n, &after), Some(b));
            }
        }
    }
}
