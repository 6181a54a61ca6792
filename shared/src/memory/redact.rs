//! Secret redaction, step 2 of the L1 pipeline: API keys, tokens, passwords and private keys in
//! a turn are masked before any LLM sees the text and before any memory is stored. Session
//! compaction, scenes and the persona mask with it too, on the way to their model and on what
//! it writes back ([`redact_json`] for JSON briefs, [`count_masked`] for the metric).
//!
//! A secret is replaced by a marker naming its kind, `[REDACTED:api_key]`; for `key=value`
//! forms only the value is masked (`DB_PASSWORD=[REDACTED:password]`), so the memory still
//! says *that* a password was set. Two families of patterns:
//! - **recognizable formats**, masked wherever they appear: PEM private-key blocks, JWTs,
//!   OpenAI/Anthropic `sk-…`, Stripe `sk_live_…` / `whsec_…` and sediment's own `sdmk_…` keys,
//!   AWS access key ids (`AKIA…`), Tencent Cloud (`AKID…`) and Alibaba Cloud (`LTAI…`) ids,
//!   GitHub (`ghp_…`, `github_pat_…`), GitLab (`glpat-…`), Slack (`xox?-…`, webhook URLs),
//!   Google (`AIza…`, `GOCSPX-…`), `Bearer` and `Basic` credentials,
//!   `scheme://user:password@host` (the user may be empty, the password may hold `@`), the
//!   `sig=` of an Azure SAS URL, `mysql -p…`;
//! - **context**: the value after a secret-named key (`password=`, `passwd:`, `pwd=`,
//!   `api_key:`, `AccountKey=`, `token=`, `client_secret=`, `ENCRYPTION_KEY=`, `SK:`,
//!   `"password": "…"`, `密码：`, `密钥是`) or in "my password is …", "the password for the
//!   admin console: …", "密码 Abc123!".
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

use crate::metrics;

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

/// Counts `masked` secrets found by `stage` on `side` (see [`metrics::REDACTIONS`]).
pub fn count_masked(stage: &'static str, side: &'static str, masked: usize) {
    if masked > 0 {
        ::metrics::counter!(metrics::REDACTIONS, "stage" => stage, "side" => side).increment(masked as u64);
    }
}

/// Masks the secrets in every string of `value`, in place; returns how many were masked. Object
/// keys are field names and are left alone. For a model's JSON answer or a JSON brief: masking
/// the serialized text instead could cut through its quoting (an unterminated PEM block is
/// masked to the end of the text).
pub fn redact_json(value: &mut serde_json::Value) -> usize {
    match value {
        serde_json::Value::String(text) => {
            let redacted = redact(text);
            let count = redacted.count;
            if let Cow::Owned(masked) = redacted.text {
                *text = masked;
            }
            count
        }
        serde_json::Value::Array(items) => items.iter_mut().map(redact_json).sum(),
        serde_json::Value::Object(map) => map.values_mut().map(redact_json).sum(),
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => 0,
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
/// before and opening quote or backtick after (`"password": "x"`, ``password: `x` ``).
const SEP: &str = r#"["']?\s*(?:=>|=|:|：)\s*["'“`]?"#;

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
            // The user may be empty (`redis://:pass@host`). The password runs to the *last*
            // `@` before the path: people paste `p@ss#1` unencoded, and a cut at the first `@`
            // would store the rest.
            r#"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/?#@\[\]]*:(?P<secret>[^\s/"'`<>]+)@"#.into(),
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
            // GitLab, Stripe webhook signing, Google OAuth client, Tencent Cloud SecretId and
            // Alibaba Cloud AccessKey ids are pasted bare, with no key name to go by.
            r"\b(?P<secret>sk-[A-Za-z0-9_-]{20,}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|sdmk_[0-9a-f]{64}|glpat-[A-Za-z0-9_-]{20,}|whsec_[A-Za-z0-9+/=]{24,}|GOCSPX-[A-Za-z0-9_-]{24,}|AKID[A-Za-z0-9]{32}|LTAI[A-Za-z0-9]{12,30})".into(),
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
            SecretKind::Password,
            // The MySQL client takes the password glued to `-p` (`-P` is the port, and a bare
            // `-p` prompts for it).
            r#"\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n]*?\s-p(?P<secret>[^\s"'`;]+)"#.into(),
            password_value,
        ),
        (
            SecretKind::ApiKey,
            // `AccountKey=` is Azure's storage connection string.
            format!(r"(?i)\b[a-z0-9_.-]*?(?:api[_-]?key|apikey|app[_-]?key|access[_-]?key(?:[_-]?id)?|account[_-]?key){SEP}{VALUE}"),
            token_value,
        ),
        (
            SecretKind::Secret,
            format!(r"(?i)\b[a-z0-9_.-]*?(?:secret|private[_-]?key|(?:encryption|signing|master|hmac)[_-]?key)[a-z0-9_-]*{SEP}{VALUE}"),
            token_value,
        ),
        (
            SecretKind::Secret,
            // The signature of an Azure SAS URL; the other parameters only say what it grants.
            r#"(?i)[?&]sig=(?P<secret>[^\s&"'<>]+)"#.into(),
            token_value,
        ),
        (
            SecretKind::Secret,
            // "AK/SK" is how Chinese cloud consoles name an access key pair; the AK is an id.
            format!(r"\bSK\s*(?:是|为|:|：|=)\s*[“'`「]?{VALUE}"),
            token_value,
        ),
        (
            SecretKind::Token,
            format!(r"(?i)\b[a-z0-9_.-]*?token{SEP}{VALUE}"),
            token_value,
        ),
        (
            SecretKind::Password,
            format!(r#"(?i)\b(?:password|passwd|passphrase|passcode)\s+(?:is|was)\s+["'`]?{PROSE_VALUE}"#),
            prose_password,
        ),
        (
            SecretKind::Password,
            // "the password for the grafana admin console: …", up to five words naming what
            // it opens.
            format!(r#"(?i)\b(?:password|passwd|passphrase)\s+(?:for|of|on|to)\s+(?:[\w.@-]+\s+){{0,4}}?[\w.@-]+(?:\s+(?:is|was)\s+|\s*[:：=]\s*)["'`]?{PROSE_VALUE}"#),
            prose_password,
        ),
        (
            SecretKind::Token,
            format!(r#"(?i)\b(?:api[ _-]?key|token|secret|access[ _-]?key)\s+(?:is|was)\s+["']?{PROSE_VALUE}"#),
            prose_token,
        ),
        (
            SecretKind::Password,
            format!(r"(?:密码|口令)\s*(?:(?:是|为)\s*[:：]?|[:：=])\s*[“'`「]?{PROSE_VALUE}"),
            cjk_value,
        ),
        (
            SecretKind::Password,
            // "用户名 dev 密码 Abc123!": a space alone separates, so the value must look like a
            // credential ("密码 reset 流程" keeps its word).
            format!(r"(?:密码|口令)\s+{PROSE_VALUE}"),
            prose_password,
        ),
        (
            SecretKind::Secret,
            format!(r"(?:密钥|秘钥|令牌)\s*(?:(?:是|为)\s*[:：]?|[:：=])\s*[“'`「]?{PROSE_VALUE}"),
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
        // Provider prefixes are split with `concat!` so that no secret scanner takes these
        // fakes for live keys.
        (
            concat!("gitlab: glp", "at-Ab12Cd34Ef56Gh78Ij90 ok"),
            "gitlab: [REDACTED:api_key] ok",
            1,
        ),
        (
            concat!("signing secret whs", "ec_Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Ji0H"),
            "signing secret [REDACTED:api_key]",
            1,
        ),
        (
            concat!("client GOC", "SPX-a1B2c3D4e5F6g7H8i9J0k1L2m3N4"),
            "client [REDACTED:api_key]",
            1,
        ),
        (
            concat!("腾讯云 AK", "ID0123456789abcdefABCDEF0123456789 用于 TDSQL-C"),
            "腾讯云 [REDACTED:api_key] 用于 TDSQL-C",
            1,
        ),
        (
            concat!("AK 是 LT", "AI5tAbCdEfGhIjKl9x，SK 是 q1W2e3R4t5Y6u7I8o9P0a1S2d3F4g5，帮我写脚本"),
            "AK 是 [REDACTED:api_key]，SK 是 [REDACTED:secret]，帮我写脚本",
            2,
        ),
        (
            "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=q1W2e3R4t5Y6u7I8o9P0+/a1S2d3F4g5==;EndpointSuffix=core.windows.net",
            "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=[REDACTED:api_key];EndpointSuffix=core.windows.net",
            1,
        ),
        (
            "https://acme.blob.core.windows.net/c?sv=2022-11-02&sp=rl&sig=AbCd%2Bef12345%2FghIJ%3D now",
            "https://acme.blob.core.windows.net/c?sv=2022-11-02&sp=rl&sig=[REDACTED:secret] now",
            1,
        ),
        (
            "REDIS_URL=redis://:Zq9x8w7v6u5t@cache.internal:6379/0",
            "REDIS_URL=redis://:[REDACTED:url_credentials]@cache.internal:6379/0",
            1,
        ),
        (
            "psql postgresql://app:p@ss#w0rd@10.0.3.7/app",
            "psql postgresql://app:[REDACTED:url_credentials]@10.0.3.7/app",
            1,
        ),
        (
            "MONGO_URI=mongodb+srv://analytics:Xy12Zw34@cluster0.ab1cd.mongodb.net/prod?w=majority",
            "MONGO_URI=mongodb+srv://analytics:[REDACTED:url_credentials]@cluster0.ab1cd.mongodb.net/prod?w=majority",
            1,
        ),
        (
            "mysql -h 10.0.3.7 -P 3306 -u root -pS3cr3t!x -e 'select 1'",
            "mysql -h 10.0.3.7 -P 3306 -u root -p[REDACTED:password] -e 'select 1'",
            1,
        ),
        ("ENCRYPTION_KEY=0f1e2d3c4b5a69788796a5b4c3d2e1f0", "ENCRYPTION_KEY=[REDACTED:secret]", 1),
        (
            "the root password is `Tr0ub4dor&3`, don't share it",
            "the root password is `[REDACTED:password]`, don't share it",
            1,
        ),
        (
            "password for the grafana admin console: Gr4f4na!x",
            "password for the grafana admin console: [REDACTED:password]",
            1,
        ),
        (
            "Redis 的密码为 `Abc@123`，连不上",
            "Redis 的密码为 `[REDACTED:password]`，连不上",
            1,
        ),
        (
            "用户名 dev 密码 Dev#2024x 端口 3306",
            "用户名 dev 密码 [REDACTED:password] 端口 3306",
            1,
        ),
        ("密码是：Abc@1234", "密码是：[REDACTED:password]", 1),
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
        "mysql -h db -P 3306 -u app -p",
        "the password for the account is required",
        "密码 reset 流程要改",
        "SKU 12345 is out of stock",
        "mail alice@example.com about https://example.com/a@b",
        "secret sauce: none",
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
    fn json_strings_are_masked_and_keys_kept() {
        let mut value = serde_json::json!({
            "password": "hunter2",
            "items": ["password=abc123", "nothing here", 42, null],
            "nested": {"note": "AKIAIOSFODNN7EXAMPLE"},
        });
        assert_eq!(redact_json(&mut value), 2);
        assert_eq!(
            value,
            serde_json::json!({
                "password": "hunter2",
                "items": ["password=[REDACTED:password]", "nothing here", 42, null],
                "nested": {"note": "[REDACTED:aws_access_key]"},
            }),
            "a bare value is not a secret without its key; the key itself is kept"
        );
        assert_eq!(redact_json(&mut value), 0, "idempotent");
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
