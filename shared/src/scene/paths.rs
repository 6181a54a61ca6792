//! Object keys of an owner's scene and persona files in the file store.
//!
//! Every owner lives under `owners/{team}/{agent}/{user}/`, so one owner's files are one
//! prefix: a listing, a snapshot or a deletion can never reach another owner's. Tenant ids are
//! client-chosen text, so each is encoded into exactly one safe key segment: `[A-Za-z0-9_-]`
//! stays as it is and every other byte of its UTF-8 becomes `%XX` (upper-case hex). `/` can
//! therefore never split a segment, `.` and `..` cannot act as path steps (`%2E`, `%2E%2E`),
//! and `%` itself is encoded, so `a/b` (`a%2Fb`) and `a%2Fb` (`a%252Fb`) stay apart. The
//! encoding is injective and no encoded segment contains `/`, so distinct tenants always get
//! distinct, non-nested prefixes.

use uuid::Uuid;

use crate::domain::Tenant;

/// `id` as one key segment (see the module docs). Tenant validation rejects empty ids; an
/// empty one would be an empty segment, still distinct from every other.
pub fn encode_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `owners/{team}/{agent}/{user}/`, each id encoded.
pub fn owner_prefix(tenant: &Tenant) -> String {
    format!(
        "owners/{}/{}/{}/",
        encode_segment(&tenant.team),
        encode_segment(&tenant.agent),
        encode_segment(&tenant.user)
    )
}

/// Where the owner's scene documents live; the only prefix the scene editor may touch.
pub fn scenes_prefix(tenant: &Tenant) -> String {
    format!("{}scenes/", owner_prefix(tenant))
}

/// One scene document.
pub fn scene_key(tenant: &Tenant, scene_id: Uuid) -> String {
    format!("{}{}.md", scenes_prefix(tenant), scene_id.as_hyphenated())
}

/// The owner's persona document.
pub fn persona_key(tenant: &Tenant) -> String {
    format!("{}persona/persona.md", owner_prefix(tenant))
}

/// The journal (copy-on-write snapshot) of one edit run; `version` is encoded like an id.
pub fn scene_snapshot_prefix(tenant: &Tenant, version: &str) -> String {
    format!("{}snapshots/scenes/{}/", owner_prefix(tenant), encode_segment(version))
}

/// Where a soft-deleted scene's last document is kept, outside the folder the editor sees.
pub fn scene_trash_key(tenant: &Tenant, scene_id: Uuid) -> String {
    format!("{}trash/scenes/{}.md", owner_prefix(tenant), scene_id.as_hyphenated())
}

/// One persona build's document: a new object per build (version and lease token in the name),
/// so a stale builder can never overwrite the persona a newer build committed.
pub fn persona_build_key(tenant: &Tenant, version: i64, token: Uuid) -> String {
    format!(
        "{}persona/builds/{version}-{}.md",
        owner_prefix(tenant),
        token.as_hyphenated()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(team: &str, agent: &str, user: &str) -> Tenant {
        Tenant {
            team: team.into(),
            agent: agent.into(),
            user: user.into(),
        }
    }

    /// The inverse of `encode_segment`, to show that it loses nothing.
    fn decode_segment(segment: &str) -> Vec<u8> {
        let bytes = segment.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        out
    }

    const TRICKY: &[&str] = &[
        "a",
        "A",
        "a/b",
        "a%2Fb",
        "a%252Fb",
        ".",
        "..",
        "%2E",
        "a b",
        "a+b",
        "团队",
        "👩‍💻",
        "a_b",
        "a-b",
        "a.b",
        "a\\b",
        "",
        "/",
        "//",
        "a/",
        "/a",
    ];

    #[test]
    fn keeps_safe_characters_and_encodes_the_rest() {
        assert_eq!(encode_segment("team-1_A"), "team-1_A");
        assert_eq!(encode_segment("."), "%2E");
        assert_eq!(encode_segment(".."), "%2E%2E");
        assert_eq!(encode_segment("a/b"), "a%2Fb");
        assert_eq!(encode_segment("a%2Fb"), "a%252Fb");
        assert_eq!(encode_segment("团"), "%E5%9B%A2");
        assert_eq!(encode_segment("a b"), "a%20b");
        for id in TRICKY {
            let encoded = encode_segment(id);
            assert!(encoded
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-%".contains(&b)));
            assert_eq!(decode_segment(&encoded), id.as_bytes());
        }
    }

    #[test]
    fn distinct_tenants_get_distinct_prefixes() {
        let mut tenants = Vec::new();
        for team in TRICKY {
            for agent in ["x", "a/b", "a%2Fb", ".."] {
                for user in ["u", "u/v", "%"] {
                    tenants.push(tenant(team, agent, user));
                }
            }
        }
        let prefixes: Vec<String> = tenants.iter().map(owner_prefix).collect();
        for (i, a) in prefixes.iter().enumerate() {
            for (j, b) in prefixes.iter().enumerate() {
                if i != j {
                    assert_ne!(a, b, "{:?} and {:?}", tenants[i], tenants[j]);
                    // Neither owner's files may fall under the other's prefix.
                    assert!(!a.starts_with(b.as_str()), "{:?} is under {:?}", tenants[i], tenants[j]);
                }
            }
        }
    }

    #[test]
    fn builds_keys_under_the_owner_prefix() {
        let t = tenant("team/1", "..", "用户");
        let prefix = "owners/team%2F1/%2E%2E/%E7%94%A8%E6%88%B7/";
        assert_eq!(owner_prefix(&t), prefix);
        assert_eq!(scenes_prefix(&t), format!("{prefix}scenes/"));
        let id = Uuid::from_u128(1);
        assert_eq!(
            scene_key(&t, id),
            format!("{prefix}scenes/00000000-0000-0000-0000-000000000001.md")
        );
        assert_eq!(persona_key(&t), format!("{prefix}persona/persona.md"));
        assert_eq!(
            scene_snapshot_prefix(&t, "2026-01-01T00:00:00Z"),
            format!("{prefix}snapshots/scenes/2026-01-01T00%3A00%3A00Z/")
        );
        assert!(!persona_key(&t).starts_with(&scenes_prefix(&t)));
    }

    #[test]
    fn run_bookkeeping_stays_out_of_the_scenes_folder_and_snapshots() {
        let t = tenant("t", "a", "u");
        let token = Uuid::from_u128(7);
        let snapshot = scene_snapshot_prefix(&t, &token.to_string());
        let trash = scene_trash_key(&t, Uuid::from_u128(8));
        let build = persona_build_key(&t, 3, token);
        assert_eq!(
            build,
            "owners/t/a/u/persona/builds/3-00000000-0000-0000-0000-000000000007.md"
        );
        for key in [&trash, &build] {
            assert!(key.starts_with(&owner_prefix(&t)));
            assert!(!key.starts_with(&scenes_prefix(&t)), "{key}");
            assert!(!key.starts_with(&snapshot), "{key}");
        }
    }
}
