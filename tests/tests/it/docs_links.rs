//! Every relative link in the repository's Markdown resolves: the file or directory it names
//! exists inside the repository, and its `#anchor`, if any, names a heading of the target file
//! by GitHub's slug rules (lowercase; punctuation dropped except `-` and `_`; spaces become
//! `-`; a repeated heading gets `-1`, `-2`, …). External links (`https:`, `mailto:`, …) are
//! not fetched. Links inside fenced code blocks and code spans are not links and are skipped.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

/// Directories never searched for Markdown: build output and version control.
const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules"];

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_dir() {
            if !SKIPPED_DIRS.contains(&name) {
                markdown_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// The text of `markdown` outside fenced code blocks, as paragraphs (runs of non-blank
/// lines), each with the 1-based line it starts on. Code spans are blanked out, across the
/// lines of a paragraph as GitHub does.
fn prose_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut fence: Option<String> = None;
    let mut current: Option<(usize, String)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(marker) = &fence {
            if trimmed.starts_with(marker.as_str())
                && trimmed
                    .trim_start_matches(marker.chars().next().unwrap())
                    .trim()
                    .is_empty()
            {
                fence = None;
            }
            continue;
        }
        let fence_char = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        if let Some(c) = fence_char {
            let run = trimmed.chars().take_while(|x| *x == c).count();
            if run >= 3 {
                fence = Some(std::iter::repeat_n(c, run).collect());
                blocks.extend(current.take());
                continue;
            }
        }
        if trimmed.is_empty() {
            blocks.extend(current.take());
        } else {
            let entry = current.get_or_insert_with(|| (index + 1, String::new()));
            entry.1.push_str(line);
            entry.1.push('\n');
        }
    }
    blocks.extend(current);
    blocks
        .into_iter()
        .map(|(line, text)| (line, blank_code_spans(&text)))
        .collect()
}

/// `text` with the content of every code span (a run of n backticks up to the next run of
/// exactly n) replaced by spaces; an unclosed run is literal text.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let other = chars[j..].iter().take_while(|c| **c == '`').count();
                if other == run {
                    close = Some(j);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                out.extend(chars[i..end + run].iter().map(|c| if *c == '\n' { '\n' } else { ' ' }));
                i = end + run;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// The destinations of the inline links and images (`[text](dest "title")`) and of the link
/// reference definitions (`[label]: dest`) in one prose block, with the line of each.
fn link_destinations(first_line: usize, block: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (at, _) in block.match_indices("](") {
        let rest = &block[at + 2..];
        let dest = if let Some(angled) = rest.strip_prefix('<') {
            angled.split('>').next().unwrap_or_default().to_string()
        } else {
            let mut depth = 0usize;
            let mut end = rest.len();
            for (k, c) in rest.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = k;
                        break;
                    }
                    ')' => depth -= 1,
                    c if c.is_whitespace() => {
                        end = k;
                        break;
                    }
                    _ => {}
                }
            }
            rest[..end].to_string()
        };
        found.push((first_line + block[..at].matches('\n').count(), dest));
    }
    for (offset, line) in block.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(after) = trimmed.strip_prefix('[') {
            if let Some((label, dest)) = after.split_once("]:") {
                if !label.is_empty() && !label.contains(']') {
                    if let Some(dest) = dest.split_whitespace().next() {
                        found.push((first_line + offset, dest.trim_matches(['<', '>']).to_string()));
                    }
                }
            }
        }
    }
    found
}

/// GitHub's anchor for a heading's text: inline markup dropped, lowercased, every character
/// but letters, digits, `-`, `_` and spaces dropped, spaces turned into `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](url)` renders as `text`.
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after
            .find("](")
            .and_then(|mid| after[mid..].find(')').map(|close| (mid, mid + close)))
        {
            Some((mid, close)) => {
                text.push_str(&after[..mid]);
                rest = &after[close + 1..];
            }
            None => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    // HTML tags render as nothing.
    let mut plain = String::new();
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            _ => plain.push(c),
        }
    }
    plain
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown file defines: its ATX headings' slugs (repeats numbered as GitHub
/// numbers them) and explicit HTML `id`/`name` attributes.
fn anchors(markdown: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut found = HashSet::new();
    let mut fence: Option<char> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        let first = trimmed.chars().next();
        if let Some(c) = first.filter(|c| *c == '`' || *c == '~') {
            if trimmed.starts_with(&std::iter::repeat_n(c, 3).collect::<String>()) {
                fence = match fence {
                    Some(open) if open == c => None,
                    None => Some(c),
                    other => other,
                };
                continue;
            }
        }
        if fence.is_some() {
            continue;
        }
        for attribute in ["id=\"", "name=\""] {
            for (at, _) in line.match_indices(attribute) {
                if let Some(value) = line[at + attribute.len()..].split('"').next() {
                    found.insert(value.to_string());
                }
            }
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !trimmed[hashes..].starts_with([' ', '\t']) {
            continue;
        }
        let text = trimmed[hashes..].trim().trim_end_matches('#').trim_end();
        let base = slug(&blank_code_markers(text));
        let count = seen.entry(base.clone()).or_insert(0);
        let anchor = if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        };
        *count += 1;
        found.insert(anchor);
    }
    found
}

/// A heading's text as rendered: code spans keep their content, emphasis markers go.
fn blank_code_markers(text: &str) -> String {
    text.chars().filter(|c| !matches!(c, '`' | '*')).collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(value) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            {
                out.push(value);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` with `.` and `..` resolved lexically, or `None` when it climbs above `root`.
fn normalize(root: &Path, path: &Path) -> Option<PathBuf> {
    let mut parts: Vec<Component> = Vec::new();
    for component in path.strip_prefix(root).ok()?.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            other @ (Component::Prefix(_) | Component::RootDir | Component::Normal(_)) => parts.push(other),
        }
    }
    Some(parts.iter().fold(root.to_path_buf(), |acc, part| acc.join(part)))
}

/// What one run of the checker found.
#[derive(Debug, Default)]
struct Report {
    files: usize,
    checked: usize,
    external: usize,
    broken: Vec<String>,
}

/// Checks every relative link of every Markdown file under `root`.
fn check_tree(root: &Path) -> Report {
    let mut files = Vec::new();
    markdown_files(root, &mut files);
    files.sort();
    let mut report = Report {
        files: files.len(),
        ..Report::default()
    };
    let mut anchor_cache: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let shown = file.strip_prefix(root).unwrap_or(file).display().to_string();
        for (first_line, block) in prose_blocks(&text) {
            for (line, dest) in link_destinations(first_line, &block) {
                let dest = dest.trim();
                let is_external = dest.split_once(':').is_some_and(|(scheme, _)| {
                    !scheme.is_empty()
                        && scheme
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
                }) || dest.starts_with("//");
                if is_external {
                    report.external += 1;
                    continue;
                }
                report.checked += 1;
                let (path_part, anchor) = match dest.split_once('#') {
                    Some((path, anchor)) => (path, Some(anchor)),
                    None => (dest, None),
                };
                let path_part = path_part.split('?').next().unwrap_or_default();
                let target = if path_part.is_empty() {
                    Some(file.clone())
                } else if let Some(absolute) = path_part.strip_prefix('/') {
                    normalize(root, &root.join(percent_decode(absolute)))
                } else {
                    normalize(
                        root,
                        &file
                            .parent()
                            .expect("file has a parent")
                            .join(percent_decode(path_part)),
                    )
                };
                let Some(target) = target else {
                    report
                        .broken
                        .push(format!("{shown}:{line}: {dest}: leaves the repository"));
                    continue;
                };
                if !target.exists() {
                    report
                        .broken
                        .push(format!("{shown}:{line}: {dest}: no such file or directory"));
                    continue;
                }
                let Some(anchor) = anchor.filter(|a| !a.is_empty()) else {
                    continue;
                };
                if target.extension().is_some_and(|e| e == "md") {
                    let known = anchor_cache.entry(target.clone()).or_insert_with(|| {
                        anchors(
                            &std::fs::read_to_string(&target)
                                .unwrap_or_else(|e| panic!("read {}: {e}", target.display())),
                        )
                    });
                    if !known.contains(&percent_decode(anchor)) {
                        report
                            .broken
                            .push(format!("{shown}:{line}: {dest}: no heading with anchor #{anchor}"));
                    }
                } else {
                    // A source file's anchors are GitHub's line anchors: `#L10` or `#L10-L20`.
                    let line_anchor = anchor.split('-').all(|part| {
                        part.strip_prefix('L')
                            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
                    });
                    if !line_anchor {
                        report
                            .broken
                            .push(format!("{shown}:{line}: {dest}: #{anchor} is not a line anchor"));
                    }
                }
            }
        }
    }
    report
}

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

#[test]
fn every_relative_markdown_link_resolves() {
    let root = repository_root();
    let report = check_tree(&root);
    println!(
        "docs links: {} relative links checked in {} Markdown files ({} external links not fetched)",
        report.checked, report.files, report.external
    );
    assert!(
        report.files > 0 && report.checked > 0,
        "no Markdown links found under {}",
        root.display()
    );
    assert!(
        report.broken.is_empty(),
        "broken Markdown links:\n{}",
        report.broken.join("\n")
    );
}

#[test]
fn a_broken_link_fails_the_check() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("api")).unwrap();
    std::fs::write(
        root.join("README.md"),
        "# Front door\n\n## Try it (five minutes)\n\n## Try it (five minutes)\n\n\
         [ok](api/README.md#errors-and-codes) [ok](#try-it-five-minutes-1) [ok](api/)\n\
         [ok](https://example.com/missing) `[code](nowhere.md)`\n\n\
         ```sh\n[fenced](nowhere.md)\n```\n\n\
         [bad file](workers/README.md) [bad anchor](api/README.md#limits)\n\
         [bad self](#try-it) [outside](../DESIGN.md)\n\n[ref]: api/README.md#nope\n",
    )
    .unwrap();
    std::fs::write(root.join("api/README.md"), "# API\n\n## Errors and `codes`\n").unwrap();
    let report = check_tree(root);
    assert_eq!(report.files, 2);
    assert_eq!(report.external, 1);
    assert_eq!(report.checked, 8, "{report:?}");
    let broken: Vec<&str> = report.broken.iter().map(|b| b.rsplit_once(": ").unwrap().0).collect();
    assert_eq!(
        broken,
        [
            "README.md:14: workers/README.md",
            "README.md:14: api/README.md#limits",
            "README.md:15: #try-it",
            "README.md:15: ../DESIGN.md",
            "README.md:17: api/README.md#nope",
        ],
        "{report:?}"
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("Scenes and persona (L2 and L3)"), "scenes-and-persona-l2-and-l3");
    assert_eq!(slug("Tokens of an identity provider"), "tokens-of-an-identity-provider");
    assert_eq!(
        slug(&blank_code_markers("`SEDIMENT_AUTH` and *auth*")),
        "sediment_auth-and-auth"
    );
    assert_eq!(slug("Memories — L1 / cards"), "memories--l1--cards");
    assert_eq!(slug("[API](api/README.md) reference"), "api-reference");
    assert_eq!(slug("召回 Recall"), "召回-recall");
}
