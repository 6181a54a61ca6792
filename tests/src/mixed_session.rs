//! A deterministic mixed Chinese/English working session: a DBA and an assistant talking about
//! tables, migrations, slow queries and deploys, the way such sessions mix languages — Chinese
//! sentences around English identifiers, SQL, stack traces, tool output in JSON, code.
//!
//! Used by the session-context tests (a 200-turn session that crosses the summary and
//! compaction thresholds), the context benchmark (10k turns) and the token-estimate
//! measurement, so all three see the same kind of text.

use serde_json::{json, Value};

use crate::rng::Rng;

const TABLES: &[&str] = &[
    "orders",
    "order_items",
    "users",
    "payments",
    "inventory",
    "shipments",
    "coupons",
];
const COLUMNS: &[&str] = &[
    "amount",
    "status",
    "region",
    "created_at",
    "user_id",
    "sku",
    "discount_rate",
];
const REGIONS: &[&str] = &["北京", "上海", "广州", "深圳", "成都", "杭州"];
const SERVICES: &[&str] = &[
    "order-api",
    "billing-worker",
    "report-cron",
    "search-indexer",
    "gateway",
];

/// One user turn: a request, a preference, a decision, a report of an error, small talk.
fn user_turn(rng: &mut Rng, i: usize) -> String {
    let t = rng.pick(TABLES);
    let c = rng.pick(COLUMNS);
    let r = rng.pick(REGIONS);
    let s = rng.pick(SERVICES);
    match rng.below(12) {
        0 => format!("帮我查一下 {t} 表里 {r} 区域最近 7 天的 {c} 分布，按天分组。"),
        1 => format!(
            "Can you add an index on {t}.{c}? The dashboard query takes 3.{} seconds now.",
            i % 10
        ),
        2 => format!("我决定把 {t} 按月分区，先从 2024 年的数据开始迁移。"),
        3 => format!("{s} 又报错了：ERROR: deadlock detected while updating {t}，你看看怎么回事？"),
        4 => "以后写 SQL 请都用小写关键字，我不喜欢全大写的风格。".to_owned(),
        5 => format!("TODO: 下周一之前把 {t} 的历史数据归档到冷存储，记得提醒我。"),
        6 => format!("Let's rename column {c} to {c}_v2 in {t} and keep a view for the old name."),
        7 => format!("早上好，今天先处理 {s} 的告警，然后看 {r} 的报表。"),
        8 => format!("请执行 DELETE FROM {t} WHERE {c} IS NULL AND created_at < '2023-01-01'，先告诉我会删多少行。"),
        9 => format!("I prefer answers in Chinese, but keep table and column names in English, like {t}.{c}."),
        10 => format!("ALTER TABLE {t} ADD COLUMN {c}_note text; 这个改动需要先在 staging 跑一遍吗？"),
        _ => format!(
            "为什么 {s} 的 p99 延迟从 80ms 涨到了 {}ms？昨天刚发布了 v2.{}.0。",
            200 + i % 300,
            i % 9
        ),
    }
}

/// One assistant turn: an answer with SQL, a plan, a fix, a tool call's result.
fn assistant_turn(rng: &mut Rng, i: usize) -> String {
    let t = rng.pick(TABLES);
    let c = rng.pick(COLUMNS);
    let r = rng.pick(REGIONS);
    let s = rng.pick(SERVICES);
    match rng.below(9) {
        0 => format!(
            "可以用下面的查询：\n```sql\nselect date_trunc('day', created_at) as day, count(*), sum({c})\nfrom {t}\nwhere region = '{r}' and created_at > now() - interval '7 days'\ngroup by 1 order by 1;\n```\n结果按天返回，{c} 为空的行不计入 sum。"
        ),
        1 => format!(
            "I created the index with `create index concurrently {t}_{c}_idx on {t} ({c});` — it took 41 s and the query plan now uses an Index Scan (cost 0.43..812.55). 查询耗时降到了 {} ms。",
            20 + i % 70
        ),
        2 => format!(
            "分区方案：\n1. 新建 {t}_p 父表，按 created_at 做 range 分区；\n2. 用 pg_partman 每月自动建分区；\n3. 双写一周后切换读流量；\n4. 旧表保留 30 天再删除。\n风险：外键 {t}.user_id 需要改成触发器校验。"
        ),
        3 => format!(
            "死锁原因：{s} 同时按不同顺序更新 {t} 和 payments。日志：\n```\nERROR:  deadlock detected\nDETAIL:  Process 48211 waits for ShareLock on transaction 99120; blocked by process 48230.\nHINT:  See server log for query details.\n```\n修复：统一按主键升序加锁，已在 PR #{} 里改好。",
            1000 + i
        ),
        4 => format!(
            "{{\"tool\": \"run_sql\", \"database\": \"prod-{r}\", \"rows\": {}, \"elapsed_ms\": {}, \"plan\": \"Seq Scan on {t}\"}}",
            1000 + i * 7 % 9000,
            i % 500
        ),
        5 => format!(
            "Done. The migration `V{:03}__rename_{c}.sql` renames {t}.{c} and creates view {t}_compat so old readers keep working. Rollback: `alter table {t} rename column {c}_v2 to {c}; drop view {t}_compat;`",
            i % 200
        ),
        6 => format!(
            "好的，以后 SQL 都用小写。另外提醒一下：{t} 表有 {} 万行，DELETE 建议分批，每批 5000 行，避免长事务拖慢 {s}。",
            10 + i % 90
        ),
        7 => format!(
            "p99 上涨是因为 v2 版本去掉了 {t} 查询上的 limit，返回行数从 50 涨到 5000。I'd restore `limit 50` and add pagination on the client; 回滚也可以，但不推荐。"
        ),
        _ => format!(
            "已记录待办：归档 {t} 的历史数据（截止下周一）。建议先导出到 S3：`copy (select * from {t} where created_at < '2023-01-01') to program 'gzip > /tmp/{t}.csv.gz' csv header;`"
        ),
    }
}

/// The `n` turns of a session for `seed`, alternating user and assistant, as the JSON the
/// append endpoint takes.
pub fn turns(seed: u64, n: usize) -> Vec<Value> {
    turns_from(seed, 0, n)
}

/// Turns `start..start + n` of the session for `seed` (the same text as [`turns`] gives at
/// those positions).
pub fn turns_from(seed: u64, start: usize, n: usize) -> Vec<Value> {
    (start..start + n)
        .map(|i| {
            let (role, content) = turn(seed, i);
            json!({ "role": role, "content": content })
        })
        .collect()
}

/// Turn `i` of the session for `seed`: its role and content.
pub fn turn(seed: u64, i: usize) -> (&'static str, String) {
    let mut rng = Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ (i as u64).wrapping_mul(0x9E37_79B9));
    rng.next_u64();
    if i.is_multiple_of(2) {
        ("user", user_turn(&mut rng, i))
    } else {
        ("assistant", assistant_turn(&mut rng, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_deterministic_and_mixed() {
        assert_eq!(turns(7, 20), turns(7, 20));
        assert_eq!(turns_from(7, 10, 5), turns(7, 15)[10..].to_vec());
        let all: String = turns(7, 200)
            .iter()
            .map(|t| t["content"].as_str().unwrap().to_owned())
            .collect();
        let cjk = all.chars().filter(|c| ('\u{4E00}'..='\u{9FFF}').contains(c)).count();
        let latin = all.chars().filter(char::is_ascii_alphabetic).count();
        assert!(cjk > 2_000 && latin > 2_000, "cjk {cjk}, latin {latin}");
    }
}
