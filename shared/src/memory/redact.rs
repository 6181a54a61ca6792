//! Secret redaction, step 2 of the L1 pipeline: API keys, tokens, passwords and private keys in
//! a turn are masked before any LLM sees the text and before any memory is stored.
//!
//! A secret is replaced by a marker naming its kind, `[REDACTED:api_key]`; for `key=value`
//! forms only the value is masked (`DB_PASSWORD=[REDACTED:password]`), so the memory still
//! says *that* a password was set. Two families of patterns:
//! - **recognizable formats**, masked wherever they appear: PEM private-key blocks, JWTs,
//!   OpenAI/Anthropic `sk-…`, Stripe `sk_live_…` and sediment's own `sdmk_…` keys, AWS access key ids (`AKIA…`), GitHub
//!   (`ghp_…`, `github_pat_…`), Slack (`xox?-…`, webhook URLs), Google (`AIza…`), `Bearer` and
//!   `Basic` credentials, `scheme://user:password@host`;
//! - **context**: the value after a secret-named key (`password=`, `passwd:`, `pwd=`,
//!   `api_key:`, `token=`, `client_secret=`, `"password": "…"`, `密码：`, `密钥是`) or in
//!   "my password is …".
//!
//! # What is deliberately left alone
//! A bare high-entropy string with no recognizable prefix and no secret-named key next to it is
//! **not** masked: commit hashes, checksums, UUIDs and request ids are everyday engineering
//! talk and valuable in memories, and a 40-character hex commit is indistinguishable from a
//! key by entropy alone. An AWS secret access key is therefore masked only when named
//! (`aws_secret_access_key = …`). Token-like keys (`token=`, `api_key=`, `secret=`) need a
//! value of 8+ characters that is not all digits, so `max_token=4096` survives; prose forms
//! ("the token is …", "密码是 …") need a value that looks like a credential, so "the password is
//! required" and "密码是什么" survive. Template placeholders (`${DB_PASSWORD}`, `<your-key>`,
//! `{{ .Values.token }}`) are not secrets and are kept.
//!
//! # Guarantees
//! - Idempotent: redacting redacted text changes nothing and counts nothing (a marker is never
//!   taken for a value).
//! - UTF-8 safe: every cut is at a regex match boundary, so at a character boundary; a value
//!   stops at Chinese punctuation as it does at ASCII ("密码：abc123，用户名…").
//! - Fail-safe direction: prose such as "Password: please set one" loses one word. Losing a
//!   word of prose is cheaper than storing a secret in long-term memory. A `key=value` value
//!   runs to the next whitespace, quote, comma or semicolon, so a non-ASCII password is masked
//!   too; a prose value ("my password is …", "密码是…") is an ASCII run only.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};

/// What kind of secret was masked; `as_str` appears in the marker and as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SecretKind {
    PrivateKey,
    Jwt,
    UrlCredentials,
    GithubToken,
    SlackToken,
    GoogleApiKey,
    /// Provider API keys (`sk-…`, `sk_live_…`) and `api_key=` values.
    ApiKey,
    AwsAccessKey,
    AwsSecretKey,
    BearerToken,
    Password,
    Token,
    Secret,
}

impl SecretKind {
    pub const ALL: &'static [SecretKind] = &[
        Self::PrivateKey,
        Self::Jwt,
        Self::UrlCredentials,
        Self::GithubToken,
        Self::SlackToken,
        Self::GoogleApiKey,
        Self::ApiKey,
        Self::AwsAccessKey,
        Self::AwsSecretKey,
        Self::BearerToken,
        Self::Password,
        Self::Token,
        Self::Secret,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PrivateKey => "private_key",
            Self::Jwt => "jwt",
            Self::UrlCredentials => "url_credentials",
            Self::GithubToken => "github_token",
            Self::SlackToken => "slack_token",
            Self::GoogleApiKey => "google_api_key",
            Self::ApiKey => "api_key",
            Self::AwsAccessKey => "aws_access_key",
            Self::AwsSecretKey => "aws_secret_key",
            Self::BearerToken => "bearer_token",
            Self::Password => "password",
            Self::Token => "token",
            Self::Secret => "secret",
        }
    }

    /// The text that replaces a secret of this kind.
    pub fn marker(self) -> String {
        format!("{MARKER_PREFIX}{}]", self.as_str())
    }
}

/// How every marker starts; a value starting with it is already redacted.
pub const MARKER_PREFIX: &str = "[REDACTED:";

/// Text with its secrets masked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted<'a> {
    /// Borrowed when nothing was masked.
    pub text: Cow<'a, str>,
    /// How many secrets were masked.
    pub count: usize,
    /// The distinct kinds masked, in `SecretKind` order.
    pub kinds: Vec<SecretKind>,
}

/// Masks every secret in `text`; see the module doc for what counts as one.
pub fn redact(text: &str) -> Redacted<'_> {
    let mut out = Cow::Borrowed(text);
    let mut count = 0;
    let mut kinds = Vec::new();
    for rule in RULES.iter() {
        if !rule.re.is_match(&out) {
            continue;
        }
        let mut hits = 0;
        let replaced = rule
            .re
            .replace_all(&out, |caps: &Captures<'_>| mask(rule, caps, &mut hits))
            .into_owned();
        if hits > 0 {
            out = Cow::Owned(replaced);
            count += hits;
            kinds.push(rule.kind);
        }
    }
    kinds.sort_unstable();
    kinds.dedup();
    Redacted {
        text: out,
        count,
        kinds,
    }
}

/// The match with its `secret` group replaced by the marker, or unchanged when the value is
/// already a marker or fails the rule's check.
fn mask(rule: &Rule, caps: &Captures<'_>, hits: &mut usize) -> String {
    let whole = &caps[0];
    let Some(secret) = caps.name("secret") else {
        return whole.to_owned();
    };
    // Sentence punctuation after a value is prose, not part of the secret.
    let value = secret.as_str().trim_end_matches(['.', ')', ']', '}', '>']);
    if value.is_empty() || secret.as_str().starts_with(MARKER_PREFIX) || !(rule.accept)(value) {
        return whole.to_owned();
    }
    *hits += 1;
    let start = secret.start() - caps.get(0).map_or(0, |m| m.start());
    let end = start + value.len();
    format!("{}{}{}", &whole[..start], rule.kind.marker(), &whole[end..])
}

struct Rule {
    kind: SecretKind,
    re: Regex,
    /// Whether the captured value is really a secret.
    accept: fn(&str) -> bool,
}

/// The value after a `key=` or `key:`: anything up to whitespace, a quote, a comma or a
/// semicolon (JSON, CSV, shell), ASCII or CJK punctuation alike.
const VALUE: &str = r#"(?P<secret>[^\s"',;`，。；、！？）】」]+)"#;
/// A value in prose ("my password is …", "密码是…"): an ASCII run only, so the Chinese words
/// after it ("密码是abc123用户名…") or instead of it ("密码是什么") are never taken.
const PROSE_VALUE: &str = r#"(?P<secret>[[:graph:]&&[^"',;`]]+)"#;
/// A key's separator from its value: `=`, `:`, `：`, `=>`, with an optional closing quote
/// before and opening quote after (`"password": "x"`).
const SEP: &str = r#"["']?\s*(?:=>|=|:|：)\s*["'“]?"#;

fn any(_: &str) -> bool {
    true
}

/// Template variables and masks are not secrets.
fn is_placeholder(value: &str) -> bool {
    value.starts_with(['$', '{', '<', '%'])
        || value.chars().all(|c| matches!(c, '*' | 'x' | 'X' | '.' | '•' | '-'))
        || [
            "null",
            "none",
            "nil",
            "true",
            "false",
            "required",
            "optional",
            "empty",
            "undefined",
        ]
        .iter()
        .any(|w| value.eq_ignore_ascii_case(w))
}

fn password_value(value: &str) -> bool {
    !is_placeholder(value)
}

fn token_value(value: &str) -> bool {
    value.len() >= 8 && !value.bytes().all(|b| b.is_ascii_digit()) && !is_placeholder(value)
}

/// "my password is hunter2": a credential has a digit or a symbol; "is required" has neither.
fn prose_password(value: &str) -> bool {
    value.len() >= 4 && value.bytes().any(|b| !b.is_ascii_alphabetic()) && !is_placeholder(value)
}

/// "the token is …": long, with letters and digits, unlike "expired" or "valid".
fn prose_token(value: &str) -> bool {
    value.len() >= 12
        && value.bytes().any(|b| b.is_ascii_digit())
        && value.bytes().any(|b| b.is_ascii_alphabetic())
        && !is_placeholder(value)
}

fn cjk_value(value: &str) -> bool {
    value.len() >= 3 && !is_placeholder(value)
}

/// In application order: formats first, so a key=value rule later finds a marker as the value
/// (`OPENAI_API_KEY=[REDACTED:api_key]`) and leaves it alone.
/// A rule as written: kind, pattern, value check.
type RuleSpec = (SecretKind, String, fn(&str) -> bool);

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let rules: Vec<RuleSpec> = vec![
        (
            SecretKind::PrivateKey,
            // An unterminated block (a truncated paste) is masked to the end of the text.
            r"(?s)(?P<secret>-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z))".into(),
            any,
        ),
        (
            SecretKind::Jwt,
            r"\b(?P<secret>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)".into(),
            any,
        ),
        (
            SecretKind::UrlCredentials,
            r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/?#@\[\]]+:(?P<secret>[^\s/?#@]+)@".into(),
            any,
        ),
        (
            SecretKind::GithubToken,
            r"\b(?P<secret>(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})".into(),
            any,
        ),
        (
            SecretKind::SlackToken,
            r"\b(?P<secret>xox[abposr]-[A-Za-z0-9-]{10,}|https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+)".into(),
            any,
        ),
        (SecretKind::GoogleApiKey, r"\b(?P<secret>AIza[0-9A-Za-z_-]{35})".into(), any),
        (
            SecretKind::ApiKey,
            // sediment's own keys (`shared::auth`) too: a key pasted into a turn is a secret.
            r"\b(?P<secret>sk-[A-Za-z0-9_-]{20,}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|sdmk_[0-9a-f]{64})".into(),
            any,
        ),
        (
            SecretKind::AwsAccessKey,
            r"\b(?P<secret>(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA)[A-Z0-9]{16})\b".into(),
            any,
        ),
        (
            SecretKind::AwsSecretKey,
            format!(r"(?i)\baws_?secret_?(?:access_?)?key{SEP}{VALUE}"),
            any,
        ),
        (
            SecretKind::BearerToken,
            r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{16,})".into(),
            any,
        ),
        (
            SecretKind::Password,
            r"(?i)\bauthorization\s*:\s*basic\s+(?P<secret>[A-Za-z0-9+/=]{8,})".into(),
            any,
        ),
        (
            SecretKind::Password,
            format!(r"(?i)\b[a-z0-9_.-]*?(?:password|passwd|passphrase|passcode|pwd){SEP}{VALUE}"),
            password_value,
        ),
        (
            SecretKind::ApiKey,
            format!(r"(?i)\b[a-z0-9_.-]*?(?:api[_-]?key|apikey|app[_-]?key|access[_-]?key(?:[_-]?id)?){SEP}{VALUE}"),
            token_value,
        ),
        (
            SecretKind::Secret,
            format!(r"(?i)\b[a-z0-9_.-]*?(?:secret|private[_-]?key)[a-z0-9_-]*{SEP}{VALUE}"),
            token_value,
        ),
        (
            SecretKind::Token,
            format!(r"(?i)\b[a-z0-9_.-]*?token{SEP}{VALUE}"),
            token_value,
        ),
        (
            SecretKind::Password,
            format!(r#"(?i)\b(?:password|passwd|passphrase|passcode)\s+(?:is|was)\s+["']?{PROSE_VALUE}"#),
            prose_password,
        ),
        (
            SecretKind::Token,
            format!(r#"(?i)\b(?:api[ _-]?key|token|secret|access[ _-]?key)\s+(?:is|was)\s+["']?{PROSE_VALUE}"#),
            prose_token,
        ),
        (
            SecretKind::Password,
            format!(r"(?:密码|口令)(?:是|为|:|：|=)\s*[“']?{PROSE_VALUE}"),
            cjk_value,
        ),
        (
            SecretKind::Secret,
            format!(r"(?:密钥|秘钥|令牌)(?:是|为|:|：|=)\s*[“']?{PROSE_VALUE}"),
            cjk_value,
        ),
    ];
    rules
        .into_iter()
        .map(|(kind, pattern, accept)| Rule {
            kind,
            re: Regex::new(&pattern).expect("valid regex"),
            accept,
        })
        .collect()
});

#[cfg(test)]
mod tests {
    use super::*;

    /// (input, expected output, expected count).
    const CASES: &[(&str, &str, usize)] = &[
        (
            "my key is sk-proj-Abc123Def456Ghi789Jkl012Mno345",
            "my key is [REDACTED:api_key]",
            1,
        ),
        (
            "OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz123456 and go",
            "OPENAI_API_KEY=[REDACTED:api_key] and go",
            1,
        ),
        ("stripe: sk_live_51HxYzAbCdEfGhIjKl", "stripe: [REDACTED:api_key]", 1),
        (
            "sediment key sdmk_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef here",
            "sediment key [REDACTED:api_key] here",
            1,
        ),
        (
            "AWS key AKIAIOSFODNN7EXAMPLE in prod",
            "AWS key [REDACTED:aws_access_key] in prod",
            1,
        ),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "aws_secret_access_key = [REDACTED:aws_secret_key]",
            1,
        ),
        (
            "token ghp_1234567890abcdefghijklmnopqrstuvwxyzAB ok",
            "token [REDACTED:github_token] ok",
            1,
        ),
        (
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "[REDACTED:github_token]",
            1,
        ),
        (
            "slack bot xoxb-1234567890-abcdefghij",
            "slack bot [REDACTED:slack_token]",
            1,
        ),
        (
            "webhook https://hooks.slack.com/services/T000/B000/XXXXXXXX",
            "webhook [REDACTED:slack_token]",
            1,
        ),
        (
            "maps key AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "maps key [REDACTED:google_api_key]",
            1,
        ),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "jwt [REDACTED:jwt]",
            1,
        ),
        (
            "Authorization: Bearer abcdef0123456789abcdef",
            "Authorization: Bearer [REDACTED:bearer_token]",
            1,
        ),
        (
            "Authorization: Basic dXNlcjpwYXNzd29yZA==",
            "Authorization: Basic [REDACTED:password]",
            1,
        ),
        ("password=hunter2", "password=[REDACTED:password]", 1),
        ("DB_PASSWORD=s3cr3t! go", "DB_PASSWORD=[REDACTED:password] go", 1),
        ("passwd: letmein", "passwd: [REDACTED:password]", 1),
        ("pwd=abc", "pwd=[REDACTED:password]", 1),
        (
            r#"{"password": "hunter2", "user": "bob"}"#,
            r#"{"password": "[REDACTED:password]", "user": "bob"}"#,
            1,
        ),
        ("api_key: 0123abcdef0123abcdef", "api_key: [REDACTED:api_key]", 1),
        ("token=abcd1234efgh5678", "token=[REDACTED:token]", 1),
        ("client_secret=Zx9-abcdefgh-1234", "client_secret=[REDACTED:secret]", 1),
        ("my password is hunter2.", "my password is [REDACTED:password].", 1),
        ("the token is 9f8e7d6c5b4a3f2e1d0c", "the token is [REDACTED:token]", 1),
        (
            "数据库密码是Abc@123，用户名是root",
            "数据库密码是[REDACTED:password]，用户名是root",
            1,
        ),
        ("密码：p@ssw0rd。", "密码：[REDACTED:password]。", 1),
        ("密钥是 abcd-1234-efgh", "密钥是 [REDACTED:secret]", 1),
        (
            "连 postgres://admin:Pa55word@10.0.0.5:5432/orders 试试",
            "连 postgres://admin:[REDACTED:url_credentials]@10.0.0.5:5432/orders 试试",
            1,
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAKC\n-----END RSA PRIVATE KEY-----\nthat's it",
            "[REDACTED:private_key]\nthat's it",
            1,
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA (truncated",
            "[REDACTED:private_key]",
            1,
        ),
        (
            "user=bob password=a1 token=zzzzzzzz9",
            "user=bob password=[REDACTED:password] token=[REDACTED:token]",
            2,
        ),
        ("😀 password=秘密 🔑", "😀 password=[REDACTED:password] 🔑", 1),
    ];

    /// Ordinary text that must come through untouched.
    const UNTOUCHED: &[&str] = &[
        "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed it",
        "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "request 123e4567-e89b-12d3-a456-426614174000 failed",
        "the password is required for login",
        "password reset flow is broken",
        "密码是什么？",
        "密码要定期更换",
        "max_token=4096 and num_tokens: 512",
        "tokenizer: bert-base-uncased",
        "token count: 4096",
        "task-1234567890abcdefghijklmn is done",
        "we use scikit-learn and risk-assessment-2024-report-final",
        "the bearer of bad news",
        "DB_PASSWORD=${DB_PASSWORD}",
        "password: <your-password>",
        "token: {{ .Values.token }}",
        "visit https://example.com/path?q=1 and http://user@host/",
        "我是腾讯云 DBA，主要管北京区的 TDSQL-C",
        "our Postgres 15 runs on RDS with 3.5 TB of data",
        "",
    ];

    #[test]
    fn masks_each_kind() {
        for (input, expected, count) in CASES {
            let r = redact(input);
            assert_eq!(r.text, *expected, "{input:?}");
            assert_eq!(r.count, *count, "{input:?}");
        }
    }

    #[test]
    fn leaves_ordinary_text_alone() {
        for input in UNTOUCHED {
            let r = redact(input);
            assert_eq!(r.text, *input, "{input:?}");
            assert!(matches!(r.text, Cow::Borrowed(_)), "{input:?}");
            assert_eq!((r.count, r.kinds.len()), (0, 0), "{input:?}");
        }
    }

    #[test]
    fn is_idempotent() {
        for (input, _, _) in CASES {
            let once = redact(input).text.into_owned();
            let twice = redact(&once);
            assert_eq!(twice.text, once, "{input:?}");
            assert_eq!(twice.count, 0, "{input:?}");
        }
    }

    #[test]
    fn reports_distinct_kinds_in_order() {
        let r = redact("token=abcd1234efgh5678 password=p1 AKIAIOSFODNN7EXAMPLE password=p2");
        assert_eq!(r.count, 4);
        assert_eq!(
            r.kinds,
            [SecretKind::AwsAccessKey, SecretKind::Password, SecretKind::Token]
        );
    }

    #[test]
    fn kinds_have_distinct_labels() {
        let mut labels: Vec<_> = SecretKind::ALL.iter().map(|k| k.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), SecretKind::ALL.len());
        assert_eq!(SecretKind::ApiKey.marker(), "[REDACTED:api_key]");
    }
}
