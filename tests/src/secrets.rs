//! A corpus of realistic fake secrets, each inside a turn written the way people actually paste
//! them into a chat with an agent: `.env` blocks, `curl` lines, connection strings, service
//! account files, PEM blocks, Chinese prose.
//!
//! Every value is generated at run time from a fixed seed, so a failure reproduces, and no
//! key-shaped literal lives in the repository: secret scanners (GitHub push protection among
//! them) would rightly refuse a commit holding one, and a corpus copied from real leaks would be
//! leaking them again. Provider prefixes are assembled by concatenation for the same reason.
//!
//! Each [`Sample`] names its secret values and the *needles* that betray them: the runs of 8 or
//! more random alphanumerics in each value. A needle found anywhere means some of the secret
//! survived, even if it was cut in half or re-encoded as JSON (escaping never touches
//! alphanumerics). Needles are compared case-insensitively, so a lower-cased copy (a tag, a
//! search token) is caught too.

use std::fmt::Write as _;

/// One turn holding secrets.
#[derive(Debug, Clone)]
pub struct Sample {
    /// What kind of secret, in the corpus's own words (`aws`, `pem_rsa`, `zh_password`, …).
    pub kind: &'static str,
    /// `user`, or `assistant` when the agent repeats a secret back.
    pub role: &'static str,
    /// The turn as pasted.
    pub text: String,
    /// The secret values, whole.
    pub secrets: Vec<String>,
    /// Random runs of the secrets; none may appear in anything derived from the turn.
    pub needles: Vec<String>,
}

/// A turn that looks like a secret to a careless filter but is ordinary engineering talk, and
/// the values that must come through redaction intact.
#[derive(Debug, Clone)]
pub struct Survivor {
    pub text: String,
    pub keep: Vec<String>,
}

/// The shortest random run that counts as a needle: long enough that it never appears by
/// chance in other text, short enough that a partly masked secret still shows one.
const NEEDLE_MIN: usize = 8;

/// The tests' seeded generator with the alphabets keys are made of: deterministic across
/// platforms, and good enough to fill keys.
struct Rng(crate::rng::Rng);

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER_ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const HEX: &[u8] = b"0123456789abcdef";
const DIGITS: &[u8] = b"0123456789";
const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl Rng {
    fn new(seed: u64) -> Self {
        Self(crate::rng::Rng::new(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn from(&mut self, alphabet: &[u8], len: usize) -> String {
        (0..len)
            .map(|_| char::from(alphabet[(self.next() % alphabet.len() as u64) as usize]))
            .collect()
    }

    fn alnum(&mut self, len: usize) -> String {
        self.from(ALNUM, len)
    }

    fn hex(&mut self, len: usize) -> String {
        self.from(HEX, len)
    }

    fn digits(&mut self, len: usize) -> String {
        self.from(DIGITS, len)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    /// A password a person would pick: mixed case, digits and a symbol or two, no quotes or
    /// backslashes (those would be escaped in JSON and hide a needle).
    fn password(&mut self) -> String {
        const SYMBOLS: &[u8] = b"!#$%^*-_+=.~";
        let mut pw = self.alnum(10);
        pw.push(char::from(SYMBOLS[(self.next() % SYMBOLS.len() as u64) as usize]));
        pw.push_str(&self.alnum(5));
        pw.push_str(&self.digits(2));
        pw
    }
}

/// Standard or URL-safe base64, padded or not: JWT segments and PEM bodies.
fn base64(bytes: &[u8], alphabet: &[u8], pad: bool) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        let chars = chunk.len() + 1;
        for i in 0..4 {
            if i < chars {
                out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 63) as usize]));
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

/// A PEM block of `bytes` random bytes behind a fixed DER prefix, 64 characters a line.
fn pem(rng: &mut Rng, label: &str, der_prefix: &str, bytes: usize, newline: &str) -> String {
    let body = format!("{der_prefix}{}", base64(&rng.bytes(bytes), BASE64, true));
    let mut out = format!("-----BEGIN {label}-----{newline}");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push_str(newline);
    }
    let _ = write!(out, "-----END {label}-----");
    out
}

/// The runs of at least [`NEEDLE_MIN`] ASCII alphanumerics in `value`, without the fixed,
/// non-random parts a value shares with every other of its kind.
fn needles_of(value: &str, fixed: &[&str]) -> Vec<String> {
    let mut stripped = value.to_owned();
    for f in fixed {
        stripped = stripped.replace(f, " ");
    }
    stripped
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|run| run.len() >= NEEDLE_MIN)
        .map(str::to_owned)
        .collect()
}

/// Prefixes, PEM armour and DER headers every key of a kind starts with: not needles.
const FIXED: &[&str] = &[
    "MIIJKAIBAAKCAgEA",
    "MHcCAQEEI",
    "b3BlbnNzaC1rZXktdjEAAAAA",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    "eyJhbGciOi",
    "T3BlbkFJ",
];

struct Builder {
    rng: Rng,
    samples: Vec<Sample>,
}

impl Builder {
    fn add(&mut self, kind: &'static str, text: String, secrets: Vec<String>) {
        self.push(kind, "user", text, secrets);
    }

    fn push(&mut self, kind: &'static str, role: &'static str, text: String, secrets: Vec<String>) {
        let needles: Vec<String> = secrets.iter().flat_map(|s| needles_of(s, FIXED)).collect();
        assert!(!needles.is_empty(), "corpus sample {kind} has no needle: {secrets:?}");
        for secret in &secrets {
            assert!(text.contains(secret.as_str()), "{kind}: the turn must hold {secret}");
        }
        self.samples.push(Sample {
            kind,
            role,
            text,
            secrets,
            needles,
        });
    }
}

/// The corpus; the same for every call.
pub fn corpus() -> Vec<Sample> {
    let mut b = Builder {
        rng: Rng::new(0x5ed1_3e27_0033),
        samples: Vec::new(),
    };
    cloud(&mut b);
    keys_and_tokens(&mut b);
    connection_strings(&mut b);
    passwords(&mut b);
    b.samples
}

fn cloud(b: &mut Builder) {
    let id = format!("{}{}", "AKIA", b.rng.from(UPPER_ALNUM, 16));
    let secret = format!("{}/{}+{}", b.rng.alnum(18), b.rng.alnum(10), b.rng.alnum(10));
    b.add(
        "aws_env",
        format!(
            "Here are the staging creds, can you figure out why `aws s3 ls` says AccessDenied?\n\
             AWS_ACCESS_KEY_ID={id}\nAWS_SECRET_ACCESS_KEY={secret}\nAWS_DEFAULT_REGION=us-east-1"
        ),
        vec![id, secret],
    );

    let id = format!("{}{}", "ASIA", b.rng.from(UPPER_ALNUM, 16));
    let secret = format!("{}+{}", b.rng.alnum(20), b.rng.alnum(19));
    let session = format!(
        "IQoJb3JpZ2luX2VjE{}/{}+{}==",
        b.rng.alnum(120),
        b.rng.alnum(90),
        b.rng.alnum(60)
    );
    b.add(
        "aws_credentials_file",
        format!(
            "my ~/.aws/credentials:\n[prod-readonly]\naws_access_key_id = {id}\n\
             aws_secret_access_key = {secret}\naws_session_token = {session}\nregion = eu-west-1"
        ),
        vec![id, secret, session],
    );

    let secret_id = format!("{}{}", "AKID", b.rng.alnum(32));
    let secret_key = b.rng.alnum(32);
    b.add(
        "tencent_cloud",
        format!(
            "腾讯云 API 密钥从控制台复制的：\nSecretId: {secret_id}\nSecretKey: {secret_key}\n用它调 TDSQL-C 的 DescribeClusters 报鉴权失败"
        ),
        vec![secret_id, secret_key],
    );

    let ak = format!("{}{}", "LTAI", b.rng.alnum(20));
    let sk = b.rng.alnum(30);
    b.add(
        "aliyun_ak_sk",
        format!("阿里云 OSS 的 AK 是 {ak}，SK 是 {sk}，帮我写个上传脚本"),
        vec![ak, sk],
    );

    let key_id = b.rng.hex(40);
    let key = pem(
        &mut b.rng,
        "PRIVATE KEY",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
        1180,
        "\\n",
    );
    let project = format!("acme-analytics-{}", b.rng.digits(6));
    let client_id = b.rng.digits(21);
    b.add(
        "gcp_service_account",
        format!(
            "Our ETL job fails with invalid_grant. This is the service account file it uses:\n```json\n{{\n  \"type\": \"service_account\",\n  \"project_id\": \"{project}\",\n  \"private_key_id\": \"{key_id}\",\n  \"private_key\": \"{key}\\n\",\n  \"client_email\": \"etl-runner@{project}.iam.gserviceaccount.com\",\n  \"client_id\": \"{client_id}\",\n  \"auth_uri\": \"https://accounts.google.com/o/oauth2/auth\",\n  \"token_uri\": \"https://oauth2.googleapis.com/token\",\n  \"auth_provider_x509_cert_url\": \"https://www.googleapis.com/oauth2/v1/certs\"\n}}\n```"
        ),
        vec![key_id, key],
    );

    let account_key = format!("{}==", base64(&b.rng.bytes(64), BASE64, false));
    let account = b.rng.digits(4);
    b.add(
        "azure_storage_connection_string",
        format!(
            "The function app can't reach blob storage since yesterday. App setting:\n\
             AzureWebJobsStorage=DefaultEndpointsProtocol=https;AccountName=acmeprod{account};AccountKey={account_key};EndpointSuffix=core.windows.net"
        ),
        vec![account_key],
    );

    let sig = base64(&b.rng.bytes(32), BASE64, true)
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D");
    let bus_key = base64(&b.rng.bytes(32), BASE64, true);
    b.add(
        "azure_sas_and_service_bus",
        format!(
            "SAS URL for the backup container: https://acmebackups.blob.core.windows.net/pg-dumps?sv=2022-11-02&ss=b&srt=co&sp=rwl&se=2026-12-31T00:00:00Z&spr=https&sig={sig}\n\
             and the queue: Endpoint=sb://acme-events.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={bus_key}"
        ),
        vec![sig, bus_key],
    );
}

fn keys_and_tokens(b: &mut Builder) {
    let rsa = pem(&mut b.rng, "RSA PRIVATE KEY", "MIIJKAIBAAKCAgEA", 2330, "\n");
    b.add(
        "pem_rsa_4096",
        format!("ssh says 'invalid format' for this deploy key, what's wrong with it?\n{rsa}\nI generated it with ssh-keygen -t rsa -b 4096 -m PEM"),
        vec![rsa],
    );
    let ec = pem(&mut b.rng, "EC PRIVATE KEY", "MHcCAQEEI", 110, "\n");
    b.add(
        "pem_ec",
        format!("nginx won't load the cert, key is:\n```\n{ec}\n```"),
        vec![ec],
    );
    let openssh = pem(
        &mut b.rng,
        "OPENSSH PRIVATE KEY",
        "b3BlbnNzaC1rZXktdjEAAAAA",
        380,
        "\r\n",
    );
    b.add(
        "pem_openssh_crlf",
        format!("copied from windows, bastion rejects it:\r\n{openssh}\r\n"),
        vec![openssh],
    );
    let truncated = pem(&mut b.rng, "PRIVATE KEY", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", 600, "\n");
    let cut = truncated[..truncated.find("-----END").expect("an END line") - 1].to_owned();
    b.add(
        "pem_truncated",
        format!("the key in the vault starts like\n{cut}"),
        vec![cut],
    );

    let header = base64(
        format!("{{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"{}\"}}", b.rng.hex(16)).as_bytes(),
        BASE64URL,
        false,
    );
    let payload = base64(
        format!(
            "{{\"sub\":\"{}\",\"email\":\"li.wei@acme.dev\",\"roles\":[\"admin\"],\"exp\":17{}}}",
            b.rng.alnum(20),
            b.rng.digits(8)
        )
        .as_bytes(),
        BASE64URL,
        false,
    );
    let jwt = format!("{header}.{payload}.{}", base64(&b.rng.bytes(256), BASE64URL, false));
    b.add(
        "jwt",
        format!("the orders API answers 401 for this id_token, is it expired? {jwt}"),
        vec![jwt],
    );
    let jwt = format!(
        "{}.{}.{}",
        base64(b"{\"alg\":\"HS256\",\"typ\":\"JWT\"}", BASE64URL, false),
        base64(
            format!("{{\"uid\":{},\"tenant\":\"{}\"}}", b.rng.digits(6), b.rng.alnum(12)).as_bytes(),
            BASE64URL,
            false
        ),
        base64(&b.rng.bytes(32), BASE64URL, false)
    );
    b.add(
        "jwt_bearer_curl",
        format!("curl -s -H 'Authorization: Bearer {jwt}' https://api.acme.dev/v1/orders?limit=5 returns []"),
        vec![jwt],
    );
    let opaque = b.rng.alnum(40);
    b.add(
        "bearer_opaque",
        format!("curl -H \"Authorization: Bearer {opaque}\" -X POST https://hooks.acme.dev/deploy"),
        vec![opaque],
    );
    let basic = base64(format!("ci-bot:{}", b.rng.password()).as_bytes(), BASE64, true);
    b.add(
        "basic_auth_header",
        format!("the registry wants `Authorization: Basic {basic}` but docker login fails"),
        vec![basic],
    );

    let ghp = format!("{}{}", "ghp_", b.rng.alnum(36));
    b.add(
        "github_pat_classic",
        format!("I rotated the PAT, new one is {ghp} — update the Actions secret please"),
        vec![ghp],
    );
    let fine = format!("{}{}_{}", "github_pat_", b.rng.alnum(22), b.rng.alnum(59));
    let gl = format!("{}{}", "glpat-", b.rng.alnum(20));
    b.add(
        "github_fine_grained_and_gitlab",
        format!("GH_TOKEN={fine}\ngitlab: {gl}"),
        vec![fine, gl],
    );
    let bot = format!(
        "{}{}-{}-{}",
        "xoxb-",
        b.rng.digits(12),
        b.rng.digits(13),
        b.rng.alnum(24)
    );
    let hook = format!(
        "https://hooks.slack.com/services/T{}/B{}/{}",
        b.rng.from(UPPER_ALNUM, 8),
        b.rng.from(UPPER_ALNUM, 10),
        b.rng.alnum(24)
    );
    b.add(
        "slack",
        format!("SLACK_BOT_TOKEN={bot}\nalerts go to {hook}"),
        vec![bot, hook],
    );
    let live = format!("{}{}{}", "sk_", "live_", b.rng.alnum(99));
    let restricted = format!("{}{}{}", "rk_", "live_", b.rng.alnum(40));
    let webhook = format!("{}{}", "whsec_", b.rng.alnum(32));
    b.add(
        "stripe",
        format!(
            "Stripe prod: secret {live}, the restricted one for reporting {restricted}, and the webhook signing secret {webhook}"
        ),
        vec![live, restricted, webhook],
    );
    let (head, tail) = (b.rng.alnum(74), b.rng.alnum(74));
    let openai = format!("{}{}{head}T3BlbkFJ{tail}", "sk-", "proj-");
    b.add(
        "openai",
        format!("export OPENAI_API_KEY=\"{openai}\" then run the eval"),
        vec![openai],
    );
    let anthropic = format!("{}{}-{}AA", "sk-ant-", "api03", b.rng.from(BASE64URL, 93));
    b.add(
        "anthropic",
        format!("use my Anthropic key for the summarizer: {anthropic}"),
        vec![anthropic],
    );
    let google = format!("{}{}", "AIza", b.rng.from(BASE64URL, 35));
    let oauth = format!("{}{}", "GOCSPX-", b.rng.from(BASE64URL, 28));
    b.add(
        "google",
        format!(
            "geocoding works in the browser: https://maps.googleapis.com/maps/api/geocode/json?address=Beijing&key={google}\n\
             and the OAuth client for SSO has client id 1234-abc.apps.googleusercontent.com with {oauth}"
        ),
        vec![google, oauth],
    );
    let sdmk = format!("{}{}", "sdmk_", b.rng.hex(64));
    b.add(
        "sediment_key",
        format!("my sediment key is {sdmk}, why does /v1/recall give 403?"),
        vec![sdmk.clone()],
    );
    b.push(
        "assistant_echo_sediment_key",
        "assistant",
        format!("The key {sdmk} is scoped to agent `reporting`; your request names agent `oncall`, hence the 403."),
        vec![sdmk],
    );
}

fn connection_strings(b: &mut Builder) {
    let pw = b.rng.password();
    b.add(
        "postgres_url",
        format!("psql 'postgres://orders_rw:{pw}@orders-db.internal.acme.dev:5432/orders?sslmode=require' just hangs"),
        vec![pw.clone()],
    );
    b.push(
        "assistant_echo_postgres_url",
        "assistant",
        format!("Try `PGCONNECT_TIMEOUT=5 psql postgres://orders_rw:{pw}@orders-db.internal.acme.dev:5432/orders` to see whether it is the network."),
        vec![pw],
    );
    let pw = format!("{}@{}", b.rng.alnum(9), b.rng.alnum(9));
    b.add(
        "postgres_url_unencoded_at",
        format!("DATABASE_URL=postgresql://app:{pw}@10.0.3.7/app works in DBeaver but not in the app"),
        vec![pw],
    );
    let pw = b.rng.alnum(24);
    let cluster = b.rng.alnum(5).to_lowercase();
    b.add(
        "mongodb_srv",
        format!(
            "MONGO_URI=mongodb+srv://analytics:{pw}@cluster0.{cluster}.mongodb.net/prod?retryWrites=true&w=majority"
        ),
        vec![pw],
    );
    let pw = b.rng.alnum(32);
    let pw2 = b.rng.alnum(20);
    b.add(
        "redis_urls",
        format!("REDIS_URL=redis://:{pw}@cache.internal:6379/0\nsessions: rediss://default:{pw2}@sessions.acme.cache.amazonaws.com:6380"),
        vec![pw, pw2],
    );
    let pw = b.rng.password();
    let token = format!("{}{}", "ghp_", b.rng.alnum(36));
    b.add(
        "https_userinfo",
        format!(
            "grafana API: curl https://admin:{pw}@grafana.acme.dev/api/dashboards/home\n\
             git clone https://deploy-bot:{token}@github.com/acme/infra.git"
        ),
        vec![pw, token],
    );
    let pw = b.rng.password();
    b.add(
        "sqlserver_ado",
        format!(
            "Server=tcp:acme-sql.database.windows.net,1433;Initial Catalog=orders;User ID=sqladmin;Password={pw};Encrypt=True;"
        ),
        vec![pw],
    );
    let pw = b.rng.password();
    b.add(
        "jdbc",
        format!("spring.datasource.url=jdbc:mysql://db:3306/app?user=app&password={pw}&useSSL=true"),
        vec![pw],
    );
    let db = b.rng.password();
    let base = b.rng.hex(128);
    let jwt_secret = b.rng.alnum(48);
    let sendgrid = format!("SG.{}.{}", b.rng.from(BASE64URL, 22), b.rng.from(BASE64URL, 43));
    let twilio = b.rng.hex(32);
    let django = format!("{}!{}-{}", b.rng.alnum(20), b.rng.alnum(14), b.rng.alnum(14));
    let nextauth = base64(&b.rng.bytes(32), BASE64, true);
    let encryption = b.rng.hex(64);
    b.add(
        "dotenv_block",
        format!(
            "# .env.production\nNODE_ENV=production\nPORT=8080\nDB_PASSWORD={db}\nSECRET_KEY_BASE={base}\nJWT_SECRET={jwt_secret}\n\
             SENDGRID_API_KEY={sendgrid}\nTWILIO_AUTH_TOKEN={twilio}\nDJANGO_SECRET_KEY='{django}'\nNEXTAUTH_SECRET=\"{nextauth}\"\nENCRYPTION_KEY={encryption}\nLOG_LEVEL=info"
        ),
        vec![db, base, jwt_secret, sendgrid, twilio, django, nextauth, encryption],
    );
}

fn passwords(b: &mut Builder) {
    let pw = b.rng.password();
    b.add(
        "mysql_cli",
        format!("mysql -h 10.0.3.7 -P 3306 -u root -p{pw} -e 'show processlist' gives ERROR 1045"),
        vec![pw],
    );
    let pw = b.rng.password();
    b.add(
        "pgpassword",
        format!("PGPASSWORD={pw} pg_dump -h replica-2 -U backup orders > orders.sql"),
        vec![pw],
    );
    let pw = b.rng.password();
    b.add(
        "json_password",
        format!("the login body is {{\"username\": \"svc_etl\", \"password\": \"{pw}\"}} and it returns 500"),
        vec![pw],
    );
    let pw = b.rng.password();
    b.add(
        "prose_password_backticks",
        format!("the root password is `{pw}`, please don't share it"),
        vec![pw],
    );
    let pw = b.rng.password();
    b.add(
        "prose_password_for",
        format!("password for the grafana admin console: {pw}"),
        vec![pw],
    );
    let pw = b.rng.password();
    b.add("zh_password", format!("生产库账号 root，密码是{pw}，先别改"), vec![pw]);
    let pw = b.rng.password();
    b.add(
        "zh_kouling",
        format!("堡垒机 jump-01 的登录口令：{pw}。下周轮换"),
        vec![pw],
    );
    let pw = b.rng.password();
    b.add(
        "zh_password_backticks",
        format!("Redis 的密码为 `{pw}`，连不上的话检查白名单"),
        vec![pw],
    );
    let pw = b.rng.password();
    b.add(
        "zh_password_space",
        format!("测试环境 MySQL 用户名 dev 密码 {pw} 端口 3306"),
        vec![pw],
    );
    let key = b.rng.alnum(32);
    b.add("zh_miyao", format!("短信服务的 API 密钥：{key}"), vec![key]);
    let token = b.rng.alnum(40);
    b.add(
        "zh_lingpai",
        format!("GitLab 的访问令牌是 {token}，流水线用的"),
        vec![token],
    );
}

/// Engineering talk that must survive redaction intact: commit hashes, checksums, UUIDs,
/// token counts.
pub fn survivors() -> Vec<Survivor> {
    let mut rng = Rng::new(0x0033_5e27);
    let commit = rng.hex(40);
    let request = format!(
        "{}-{}-4{}-a{}-{}",
        rng.hex(8),
        rng.hex(4),
        rng.hex(3),
        rng.hex(3),
        rng.hex(12)
    );
    let sha = rng.hex(64);
    vec![
        Survivor {
            text: format!("Deployed commit {commit} to prod; request {request} still fails with max_tokens=4096"),
            keep: vec![commit, request],
        },
        Survivor {
            text: format!("the release tarball's sha256 is {sha}, and the password reset flow is broken again"),
            keep: vec![sha],
        },
    ]
}

/// Every needle of the corpus, with the kind it belongs to.
pub fn needles(corpus: &[Sample]) -> Vec<(&'static str, String)> {
    corpus
        .iter()
        .flat_map(|s| s.needles.iter().map(move |n| (s.kind, n.to_lowercase())))
        .collect()
}

/// The needles found in `haystack` (compared case-insensitively), the first of each kind, as
/// `kind: needle` lines with some context, for a failure message; empty when it is clean.
pub fn leaks(needles: &[(&'static str, String)], haystack: &str) -> Vec<String> {
    let lower = haystack.to_lowercase();
    let mut kinds = std::collections::HashSet::new();
    needles
        .iter()
        .filter_map(|(kind, needle)| {
            let at = lower.find(needle.as_str())?;
            if !kinds.insert(*kind) {
                return None;
            }
            let start = floor_char_boundary(&lower, at.saturating_sub(60));
            let end = floor_char_boundary(&lower, (at + needle.len() + 60).min(lower.len()));
            Some(format!("{kind}: {needle} in …{}…", &lower[start..end]))
        })
        .collect()
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_known_vectors() {
        assert_eq!(base64(b"foobar", BASE64, true), "Zm9vYmFy");
        assert_eq!(base64(b"fooba", BASE64, true), "Zm9vYmE=");
        assert_eq!(base64(b"foob", BASE64URL, false), "Zm9vYg");
    }

    #[test]
    fn the_corpus_is_stable_and_its_needles_are_distinct() {
        let a = corpus();
        let b = corpus();
        assert_eq!(a.len(), b.len());
        assert!(a.iter().zip(&b).all(|(x, y)| x.text == y.text));
        // Echo samples repeat a secret on purpose; no two user samples share a needle.
        let mut all: Vec<String> = a
            .iter()
            .filter(|s| s.role == "user")
            .flat_map(|s| s.needles.clone())
            .collect();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count);
    }
}
