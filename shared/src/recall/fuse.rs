//! One ranking of memories and turns (issue 36). Recall used to return the matching memories
//! first and fill what was left with turns; once an owner had more memories than the limit it
//! returned no turn at all, and chit-chat memories crowded the evidence out (chit-chat dev set,
//! R@10: recall 21.7 against conversation search 72.9).
//!
//! Now each list votes by rank, as reciprocal rank fusion does (`1 / (k + rank)`), and:
//! - a memory stands in for its source turns: it also takes the votes of those of them that the
//!   turn search found, and they are left out, so a memory and the turn it came from never take
//!   two slots, and a memory ranks at least as high as any of its sources;
//! - a memory's own vote is weighed (`memory_weight`): at 0 only the turn ranking places
//!   memories (recall is then conversation search with memories standing in for their turns),
//!   at 1 a memory that matches the query counts as much as a turn that does;
//! - an item the index did not rank (score 0: the completion of a small scope) gets no vote of
//!   its own and comes after the ranked ones.

use uuid::Uuid;

/// A memory as the fusion sees it: its index score (0: not ranked) and its source turns.
pub struct MemoryVote<'a> {
    pub score: f32,
    pub sources: &'a [Uuid],
}

/// A turn as the fusion sees it.
pub struct TurnVote {
    pub id: Uuid,
    pub score: f32,
}

/// One item of the fused ranking: an index into the memories or the turns, and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fused {
    Memory(usize, f32),
    Turn(usize, f32),
}

impl Fused {
    pub fn score(&self) -> f32 {
        match self {
            Self::Memory(_, score) | Self::Turn(_, score) => *score,
        }
    }
}

/// The best `limit` items of both lists (each best first), best first.
pub fn fuse(memories: &[MemoryVote<'_>], turns: &[TurnVote], limit: usize, k: usize, memory_weight: f32) -> Vec<Fused> {
    let vote = |rank: usize, score: f32| {
        if score > 0.0 {
            1.0 / (k + rank + 1) as f32
        } else {
            0.0
        }
    };
    let turn_votes: std::collections::HashMap<Uuid, f32> = turns
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id, vote(i, t.score)))
        .collect();
    let mut ranked: Vec<Fused> = memories
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let sources: f32 = m.sources.iter().filter_map(|id| turn_votes.get(id)).sum();
            Fused::Memory(i, memory_weight * vote(i, m.score) + sources)
        })
        .chain(turns.iter().enumerate().map(|(i, t)| Fused::Turn(i, vote(i, t.score))))
        .collect();
    // Stable, and memories come before turns: on a tie a memory wins over the turn it stands for.
    ranked.sort_by(|a, b| b.score().total_cmp(&a.score()));
    let mut covered = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(limit);
    for item in ranked {
        if out.len() == limit {
            break;
        }
        match item {
            Fused::Memory(i, _) => {
                covered.extend(memories[i].sources.iter().copied());
                out.push(item);
            }
            Fused::Turn(i, _) if !covered.contains(&turns[i].id) => out.push(item),
            Fused::Turn(..) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<Uuid> {
        (0..n).map(|_| Uuid::new_v4()).collect()
    }

    #[test]
    fn memories_no_longer_crowd_out_the_turns() {
        // Twelve memories that match nothing the turns match: with the old order, ten slots
        // held ten memories and no turn.
        let t = ids(10);
        let turns: Vec<TurnVote> = t.iter().map(|&id| TurnVote { id, score: 1.0 }).collect();
        let none: Vec<Uuid> = Vec::new();
        let memories: Vec<MemoryVote> = (0..12)
            .map(|_| MemoryVote {
                score: 1.0,
                sources: &none,
            })
            .collect();
        let fused = fuse(&memories, &turns, 10, 60, 1.0);
        let turns_in = fused.iter().filter(|f| matches!(f, Fused::Turn(..))).count();
        assert_eq!(turns_in, 5, "equal weight interleaves: {fused:?}");
        let fused = fuse(&memories, &turns, 10, 60, 0.0);
        assert!(
            fused[..10].iter().all(|f| matches!(f, Fused::Turn(..))),
            "weight 0: the turn ranking"
        );
    }

    #[test]
    fn a_memory_stands_in_for_its_source_turn() {
        let t = ids(3);
        let turns: Vec<TurnVote> = t.iter().map(|&id| TurnVote { id, score: 1.0 }).collect();
        // The memory made from the second turn, ranked last among the memories.
        let none: Vec<Uuid> = Vec::new();
        let from_second = [t[1]];
        let memories = [
            MemoryVote {
                score: 1.0,
                sources: &none,
            },
            MemoryVote {
                score: 1.0,
                sources: &from_second,
            },
        ];
        let fused = fuse(&memories, &turns, 10, 60, 0.0);
        assert_eq!(fused.len(), 4, "the second turn is left out: {fused:?}");
        assert!(matches!(fused[0], Fused::Turn(0, _)));
        assert!(
            matches!(fused[1], Fused::Memory(1, _)),
            "at its source's place: {fused:?}"
        );
        assert!(!fused.iter().any(|f| matches!(f, Fused::Turn(1, _))));
        assert!(
            matches!(fused[3], Fused::Memory(0, s) if s == 0.0),
            "unrelated, weight 0: last"
        );
        // With weight, its own rank adds to its source's.
        let fused = fuse(&memories, &turns, 10, 60, 1.0);
        assert!(matches!(fused[0], Fused::Memory(1, _)), "{fused:?}");
    }

    #[test]
    fn unranked_items_come_last_and_the_limit_holds() {
        let t = ids(4);
        let turns: Vec<TurnVote> = t
            .iter()
            .enumerate()
            .map(|(i, &id)| TurnVote {
                id,
                score: if i < 2 { 1.0 } else { 0.0 },
            })
            .collect();
        let fused = fuse(&[], &turns, 3, 60, 1.0);
        assert_eq!(fused.len(), 3);
        assert!(fused[0].score() > fused[1].score() && fused[2].score() == 0.0);
        assert!(fuse(&[], &turns, 0, 60, 1.0).is_empty());
    }
}
