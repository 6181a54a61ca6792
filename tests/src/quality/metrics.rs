//! Ranking metrics over the retrieved turn ids of each question.

use uuid::Uuid;

/// The cut-offs reported: R@1, R@5, R@10.
pub const KS: [usize; 3] = [1, 5, 10];

/// Accumulated scores of a set of questions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scores {
    pub questions: usize,
    /// Per cut-off in `KS`: questions with at least one evidence turn in the top k.
    pub any_hits: [usize; 3],
    /// Per cut-off in `KS`: questions with every evidence turn in the top k.
    pub all_hits: [usize; 3],
    /// Sum over questions of 1 / rank of the first evidence turn (0 when none was retrieved).
    pub reciprocal_ranks: f64,
}

/// 1-based rank of the first evidence turn in `ranked`, if any.
pub fn first_rank(ranked: &[Uuid], evidence: &[Uuid]) -> Option<usize> {
    ranked.iter().position(|id| evidence.contains(id)).map(|p| p + 1)
}

impl Scores {
    /// Scores one question: `ranked` is the retrieved list, best first. MRR is therefore
    /// MRR@`ranked.len()`.
    pub fn add(&mut self, ranked: &[Uuid], evidence: &[Uuid]) {
        self.questions += 1;
        let first = first_rank(ranked, evidence);
        for (i, k) in KS.into_iter().enumerate() {
            let top = &ranked[..k.min(ranked.len())];
            if first.is_some_and(|r| r <= k) {
                self.any_hits[i] += 1;
            }
            if !evidence.is_empty() && evidence.iter().all(|e| top.contains(e)) {
                self.all_hits[i] += 1;
            }
        }
        self.reciprocal_ranks += first.map_or(0.0, |r| 1.0 / r as f64);
    }

    pub fn merge(&mut self, other: &Scores) {
        self.questions += other.questions;
        for i in 0..KS.len() {
            self.any_hits[i] += other.any_hits[i];
            self.all_hits[i] += other.all_hits[i];
        }
        self.reciprocal_ranks += other.reciprocal_ranks;
    }

    fn ratio(&self, n: usize) -> f64 {
        if self.questions == 0 {
            0.0
        } else {
            n as f64 / self.questions as f64
        }
    }

    /// Share of questions with any evidence in the top `KS[i]`.
    pub fn recall(&self, i: usize) -> f64 {
        self.ratio(self.any_hits[i])
    }

    /// Share of questions with all their evidence in the top `KS[i]`.
    pub fn recall_all(&self, i: usize) -> f64 {
        self.ratio(self.all_hits[i])
    }

    pub fn mrr(&self) -> f64 {
        if self.questions == 0 {
            0.0
        } else {
            self.reciprocal_ranks / self.questions as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u128) -> Vec<Uuid> {
        (1..=n).map(Uuid::from_u128).collect()
    }

    #[test]
    fn arithmetic_on_a_fixed_case() {
        let ranked = ids(10);
        let u = Uuid::from_u128;
        let mut s = Scores::default();
        s.add(&ranked, &[u(1)]); // rank 1
        s.add(&ranked, &[u(3), u(99)]); // rank 3; second evidence never retrieved
        s.add(&ranked, &[u(7), u(2)]); // rank 2 (first evidence found in the list), both in top 10
        s.add(&ranked, &[u(42)]); // miss
        assert_eq!(s.questions, 4);
        assert_eq!(s.any_hits, [1, 3, 3]);
        assert_eq!(s.all_hits, [1, 1, 2]);
        assert!((s.recall(0) - 0.25).abs() < 1e-12);
        assert!((s.recall(1) - 0.75).abs() < 1e-12);
        assert!((s.recall_all(2) - 0.5).abs() < 1e-12);
        let mrr = (1.0 + 1.0 / 3.0 + 1.0 / 2.0 + 0.0) / 4.0;
        assert!((s.mrr() - mrr).abs() < 1e-12);
        assert_eq!(first_rank(&ranked, &[u(7), u(2)]), Some(2));
    }

    #[test]
    fn short_lists_and_merging() {
        let u = Uuid::from_u128;
        let mut a = Scores::default();
        a.add(&[u(5), u(6)], &[u(6)]);
        a.add(&[], &[u(6)]);
        assert_eq!(a.any_hits, [0, 1, 1]);
        assert!((a.mrr() - 0.25).abs() < 1e-12);
        let mut b = Scores::default();
        b.add(&[u(6)], &[u(6)]);
        b.merge(&a);
        assert_eq!(b.questions, 3);
        assert_eq!(b.any_hits, [1, 2, 2]);
        assert!((b.mrr() - 0.5).abs() < 1e-12);
        assert_eq!(Scores::default().mrr(), 0.0);
    }
}
