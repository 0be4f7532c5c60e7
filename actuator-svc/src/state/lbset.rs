//! A set of managed load balancers as a bit set over their positions (pure).

/// A set of managed load balancers, by position in the store's sorted list: one bit each,
/// inline up to 64 (every real cluster), so folding a report allocates nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LbSet {
    low: u64,
    high: Vec<u64>,
}

impl LbSet {
    /// Every position below `n`.
    pub(crate) fn all(n: usize) -> Self {
        let mut s = Self::default();
        for i in 0..n {
            s.insert(i);
        }
        s
    }

    pub(crate) fn insert(&mut self, i: usize) {
        if i < 64 {
            self.low |= 1 << i;
            return;
        }
        let w = i / 64 - 1;
        if self.high.len() <= w {
            self.high.resize(w + 1, 0);
        }
        self.high[w] |= 1 << (i % 64);
    }

    pub(crate) fn remove(&mut self, i: usize) {
        if i < 64 {
            self.low &= !(1 << i);
        } else if let Some(w) = self.high.get_mut(i / 64 - 1) {
            *w &= !(1 << (i % 64));
        }
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, i: usize) -> bool {
        if i < 64 {
            return self.low & (1 << i) != 0;
        }
        self.high
            .get(i / 64 - 1)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.low == 0 && self.high.iter().all(|w| *w == 0)
    }

    pub(crate) fn is_subset(&self, other: &Self) -> bool {
        self.low & !other.low == 0
            && self
                .high
                .iter()
                .enumerate()
                .all(|(i, w)| w & !other.high.get(i).copied().unwrap_or(0) == 0)
    }

    /// The positions in the set, ascending.
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.low)
            .chain(self.high.iter().copied())
            .enumerate()
            .flat_map(|(w, bits)| {
                (0..64)
                    .filter(move |b| bits & (1 << b) != 0)
                    .map(move |b| w * 64 + b)
            })
    }
}
