//! The markers around memory that sediment injects into an agent's prompt. Recall wraps its
//! output in them; ingest strips them, so the transcript keeps only what was really said and
//! recalled memory never feeds back into extraction.

use std::borrow::Cow;

/// Opens a block of recalled memory in a prompt.
pub const MEMORY_BLOCK_START: &str = "<sediment-memory>";
/// Closes a block of recalled memory.
pub const MEMORY_BLOCK_END: &str = "</sediment-memory>";

/// Removes every injected memory block (markers included) from `text`. An opening marker with
/// no closing one is dropped through to the end of the text, because a truncated block is
/// still injected memory. Whitespace left at the seams is trimmed.
pub fn strip_injected_memory(text: &str) -> Cow<'_, str> {
    if !text.contains(MEMORY_BLOCK_START) && !text.contains(MEMORY_BLOCK_END) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(MEMORY_BLOCK_START) {
        out.push_str(&rest[..start]);
        let after = &rest[start + MEMORY_BLOCK_START.len()..];
        match after.find(MEMORY_BLOCK_END) {
            Some(end) => rest = &after[end + MEMORY_BLOCK_END.len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    // A stray closing marker carries no memory of its own but must not survive either.
    let out = out.replace(MEMORY_BLOCK_END, "");
    Cow::Owned(out.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_plain_text_alone() {
        assert!(matches!(strip_injected_memory("hello"), Cow::Borrowed("hello")));
    }

    #[test]
    fn strips_blocks_anywhere() {
        let text = format!("{MEMORY_BLOCK_START}\n- likes tea\n{MEMORY_BLOCK_END}\n\nwhat should I drink?");
        assert_eq!(strip_injected_memory(&text), "what should I drink?");
        let two = format!("a {MEMORY_BLOCK_START}x{MEMORY_BLOCK_END} b {MEMORY_BLOCK_START}y{MEMORY_BLOCK_END} c");
        assert_eq!(strip_injected_memory(&two), "a  b  c");
    }

    #[test]
    fn unterminated_block_runs_to_the_end() {
        let text = format!("问题 {MEMORY_BLOCK_START} 我是 DBA");
        assert_eq!(strip_injected_memory(&text), "问题");
    }

    #[test]
    fn only_a_block_leaves_nothing() {
        let text = format!("{MEMORY_BLOCK_START}x{MEMORY_BLOCK_END}");
        assert_eq!(strip_injected_memory(&text), "");
    }
}
