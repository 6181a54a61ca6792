//! Text normalization shared by the extractor (in-batch dedup) and the judge (similarity).

use std::collections::HashSet;

use crate::memory::junk::fold_width;

/// Full-width forms folded to ASCII and typographic quotes to straight ones, so a pattern
/// written with `'` matches "I’m" and "Ｉ'm".
pub(crate) fn fold(text: &str) -> String {
    text.chars()
        .map(|c| match fold_width(c) {
            '’' | '‘' | '`' | '´' => '\'',
            '“' | '”' => '"',
            other => other,
        })
        .collect()
}

/// Lowercase letters and digits only: texts that differ only in case, spacing or punctuation
/// normalize to the same string.
pub(crate) fn normalize(text: &str) -> String {
    fold(text)
        .chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c, '\u{3040}'..='\u{30FF}' | '\u{3400}'..='\u{4DBF}' | '\u{4E00}'..='\u{9FFF}' | '\u{AC00}'..='\u{D7AF}' | '\u{F900}'..='\u{FAFF}')
}

/// Lowercase words for Latin-script text and character bigrams for CJK runs (a lone CJK
/// character is its own token), so one measure works for English, Chinese and a mix.
pub(crate) fn tokens(text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    let mut word = String::new();
    let mut cjk: Vec<char> = Vec::new();
    let flush_cjk = |cjk: &mut Vec<char>, out: &mut HashSet<String>| {
        match cjk.len() {
            0 => {}
            1 => {
                out.insert(cjk[0].to_string());
            }
            _ => out.extend(cjk.windows(2).map(|pair| pair.iter().collect::<String>())),
        }
        cjk.clear();
    };
    for c in fold(text).chars().flat_map(char::to_lowercase) {
        if is_cjk(c) {
            if !word.is_empty() {
                out.insert(std::mem::take(&mut word));
            }
            cjk.push(c);
        } else if c.is_alphanumeric() {
            flush_cjk(&mut cjk, &mut out);
            word.push(c);
        } else {
            flush_cjk(&mut cjk, &mut out);
            if !word.is_empty() {
                out.insert(std::mem::take(&mut word));
            }
        }
    }
    flush_cjk(&mut cjk, &mut out);
    if !word.is_empty() {
        out.insert(word);
    }
    out
}

/// |a ∩ b| / |a ∪ b|; 0 when both are empty.
pub(crate) fn jaccard(a: &HashSet<String>, b: &HashSet<String>) -> f32 {
    let union = a.union(b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(b).count() as f32 / union as f32
}

/// Share of `part`'s tokens that are also in `whole`; 0 when `part` is empty.
pub(crate) fn coverage(part: &HashSet<String>, whole: &HashSet<String>) -> f32 {
    if part.is_empty() {
        return 0.0;
    }
    part.intersection(whole).count() as f32 / part.len() as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> HashSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn normalizes_case_width_and_punctuation() {
        assert_eq!(normalize("I’m a DBA!"), "imadba");
        assert_eq!(normalize("Ｉ'm  a  dba"), "imadba");
        assert_eq!(normalize("我是 DBA，主要管 TDSQL-C。"), "我是dba主要管tdsqlc");
    }

    #[test]
    fn tokenizes_words_and_cjk_bigrams() {
        assert_eq!(tokens("I live in Beijing."), set(&["i", "live", "in", "beijing"]));
        assert_eq!(tokens("我住在北京"), set(&["我住", "住在", "在北", "北京"]));
        assert_eq!(
            tokens("我是 DBA，管 TDSQL-C"),
            set(&["我是", "dba", "管", "tdsql", "c"])
        );
    }

    #[test]
    fn measures_overlap() {
        let a = tokens("我住在北京");
        let b = tokens("我住在上海");
        assert!((jaccard(&a, &b) - 2.0 / 6.0).abs() < 1e-6);
        assert_eq!(coverage(&tokens("we use vim"), &tokens("we use vim and tmux")), 1.0);
        assert_eq!(jaccard(&HashSet::new(), &HashSet::new()), 0.0);
    }
}
