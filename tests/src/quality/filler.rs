//! The bulk of every conversation: small talk, work chatter, tool output and code, plus the
//! facts' distractors. It shares names, projects, services and databases with the facts, so a
//! keyword or a topic alone does not find the answer.
//!
//! Nothing here may contain a fact's exclusive answer (pet names, allergens, drinks, dates,
//! ports, fact cities); `dataset`'s tests check that.

use super::dataset::Lang;
use super::facts::{World, DATABASES};
use crate::rng::Rng;

const SMALL_TALK_EN: [&str; 24] = [
    "Morning! Coffee first, then the standup.",
    "Ugh, Monday.",
    "Thanks, that's helpful.",
    "ok",
    "Makes sense.",
    "Can you summarise that in two bullet points?",
    "Let me think about it and get back to you.",
    "Haha, fair.",
    "Can you rewrite this email so it sounds less grumpy?",
    "What's a polite way to decline a meeting?",
    "It's raining again, of course.",
    "Remind me to stretch every hour, my back is killing me.",
    "Any good podcast recommendations for the commute?",
    "I'm going to grab lunch, back in 30.",
    "How do I undo the last git commit without losing my changes?",
    "Is it normal that cargo build takes this long?",
    "Why does my docker image weigh 2 GB?",
    "Can you explain what a bloom filter is?",
    "Write me a regex for ISO dates.",
    "What's the difference between a mutex and a semaphore?",
    "Long day. Lots of meetings, little code.",
    "Did the deploy go through?",
    "Let's pick this up tomorrow.",
    "Sorry, got pulled into an incident call.",
];
const SMALL_TALK_ZH: [&str; 24] = [
    "早！先喝杯咖啡再开站会。",
    "又是周一，唉。",
    "谢谢，很有帮助。",
    "好的",
    "有道理。",
    "能帮我总结成两点吗？",
    "我想想再回复你。",
    "哈哈，也对。",
    "帮我把这封邮件改得客气一点。",
    "怎么礼貌地拒绝一个会议邀请？",
    "又下雨了。",
    "提醒我每小时起来活动一下，腰疼。",
    "通勤路上有什么好听的播客推荐吗？",
    "我去吃个午饭，半小时后回来。",
    "怎么撤销上一次 git commit 又不丢改动？",
    "cargo build 这么慢正常吗？",
    "为什么我的 docker 镜像有 2 GB？",
    "能解释一下什么是布隆过滤器吗？",
    "帮我写个匹配 ISO 日期的正则。",
    "互斥锁和信号量有什么区别？",
    "今天会议好多，代码没写几行。",
    "部署成功了吗？",
    "明天再继续吧。",
    "不好意思，刚被拉去处理线上故障了。",
];
const PERSONAL_EN: [&str; 8] = [
    "Weekend plans: hiking if the weather holds.",
    "I should really call my parents more often.",
    "Trying to read more fiction this year.",
    "My phone screen cracked, great.",
    "Thinking about learning to bake bread.",
    "The heating in the flat is broken again.",
    "Finally finished that 800-page novel.",
    "Spent the whole Sunday assembling furniture.",
];
const PERSONAL_ZH: [&str; 8] = [
    "周末天气好的话去爬山。",
    "我真该多给爸妈打打电话。",
    "今年想多读点小说。",
    "手机屏幕摔裂了，真倒霉。",
    "想学着自己烤面包。",
    "家里的暖气又坏了。",
    "终于读完那本八百页的小说了。",
    "整个周日都在组装家具。",
];
const REPLIES_EN: [&str; 12] = [
    "Got it.",
    "Sure, here you go.",
    "Noted. Anything else?",
    "Happy to help!",
    "That makes sense — want me to draft it?",
    "Good question. In short: it depends on your workload.",
    "I'd start by checking the logs around the time of the spike.",
    "Let me know if you want a more detailed version.",
    "Here's a polite option: \"Thanks for the invite, but I can't make it this time.\"",
    "Sounds like a plan.",
    "A bloom filter is a probabilistic set: it answers \"definitely not present\" or \"probably present\".",
    "A mutex lets one holder in at a time; a semaphore lets up to N.",
];
const REPLIES_ZH: [&str; 12] = [
    "好的。",
    "没问题，给你。",
    "记下了，还有别的吗？",
    "乐意帮忙！",
    "有道理，要我帮你起草吗？",
    "好问题，简单说要看具体负载。",
    "建议先看看延迟飙升那段时间的日志。",
    "需要更详细的版本可以告诉我。",
    "可以这样说：“谢谢邀请，这次我去不了。”",
    "听起来不错。",
    "布隆过滤器是一种概率型集合：它能回答“肯定不在”或“可能在”。",
    "互斥锁一次只允许一个持有者，信号量允许最多 N 个。",
];
/// Tool output and code: the same in both languages, as in real chats.
const CODE: [&str; 9] = [
    "```sql\nSELECT status, count(*) FROM invoices GROUP BY status;\n```",
    "```python\ndef retry(fn, attempts=3):\n    for i in range(attempts):\n        try:\n            return fn()\n        except Exception:\n            time.sleep(2 ** i)\n```",
    "```rust\nlet pool = PgPoolOptions::new().max_connections(20).connect(&url).await?;\n```",
    "```\nERROR: duplicate key value violates unique constraint \"orders_pkey\"\n```",
    "```bash\ngit reset --soft HEAD~1\n```",
    "```\n^\\d{4}-\\d{2}-\\d{2}$\n```",
    "```dockerfile\nFROM debian:bookworm-slim\nCOPY --from=build /app/server /usr/local/bin/\n```",
    "```yaml\nresources:\n  limits:\n    memory: 512Mi\n    cpu: 500m\n```",
    "```\nthread 'main' panicked at src/main.rs:42:9:\ncalled `Option::unwrap()` on a `None` value\n```",
];

fn pick(rng: &mut Rng, lang: Lang, en: &[&str], zh: &[&str]) -> String {
    match lang {
        Lang::En => rng.pick(en).to_string(),
        Lang::Zh => rng.pick(zh).to_string(),
    }
}

/// A user line about the owner's work: people, projects, services, databases.
fn work_line(rng: &mut Rng, w: &World) -> String {
    let p = rng.pick(&w.people).clone();
    let p2 = rng.pick(&w.people).clone();
    let project = rng.pick(&w.projects).clone();
    let svc = *rng.pick(&w.services);
    let (svc_en, svc_zh) = svc;
    let db = *rng.pick(&DATABASES);
    let n = rng.range(120, 950);
    let lines = match w.lang {
        Lang::En => [
            format!("{p} asked whether {project} could reuse the {svc_en} client."),
            format!("Can you draft a message to {p} about the {project} timeline?"),
            format!("The {svc_en} service latency spiked to {n} ms after the deploy."),
            format!("We should revisit the {db} connection pool size."),
            format!("{p} and {p2} are pairing on the {svc_en} bug today."),
            format!("Sprint review for {project} is on Thursday."),
            format!("Can you help me write the {project} status update for {p}?"),
            format!("I owe {p} a code review on the {svc_en} refactor."),
            format!("The {project} roadmap doc needs a section on risks."),
            format!("Meeting with {p} about {project} ran over by half an hour."),
            format!("Is {db} a reasonable choice for a write-heavy workload?"),
            format!("{p2} thinks the {svc_en} service needs better alerts."),
        ],
        Lang::Zh => [
            format!("{p}问 {project} 能不能复用{svc_zh}服务的客户端。"),
            format!("帮我给{p}写条消息，说一下 {project} 的时间安排。"),
            format!("发版之后{svc_zh}服务的延迟涨到了 {n} 毫秒。"),
            format!("我们得重新评估一下 {db} 的连接池大小。"),
            format!("{p}和{p2}今天一起排查{svc_zh}服务的 bug。"),
            format!("{project} 的迭代评审在周四。"),
            format!("帮我写一下给{p}的 {project} 进展汇报。"),
            format!("我还欠{p}一个{svc_zh}服务重构的代码评审。"),
            format!("{project} 的路线图文档需要补一节风险。"),
            format!("和{p}开 {project} 的会又超时了半小时。"),
            format!("写多读少的场景用 {db} 合适吗？"),
            format!("{p2}觉得{svc_zh}服务的告警需要改进。"),
        ],
    };
    rng.pick(&lines).clone()
}

/// An assistant line about the owner's work.
fn work_reply(rng: &mut Rng, w: &World) -> String {
    let p = rng.pick(&w.people).clone();
    let project = rng.pick(&w.projects).clone();
    let (svc_en, svc_zh) = *rng.pick(&w.services);
    let hour = rng.range(9, 18);
    let pods = rng.range(2, 9);
    let age = rng.range(1, 72);
    let lines = match w.lang {
        Lang::En => [
            format!("Draft for {p}: \"Quick update on {project}: we're on track, two risks flagged.\""),
            format!("The {svc_en} latency spike lines up with the {hour}:00 deploy; I'd check the connection pool."),
            format!("{project} status: API done, UI in progress, nothing blocked."),
            format!("```\n$ kubectl get pods -n {svc_en}\nNAME                 READY   STATUS    RESTARTS   AGE\n{svc_en}-7d9f8c-x2k4   1/1     Running   0          {age}h\n```"),
            format!("I'd split the {svc_en} refactor into {pods} smaller PRs so {p} can review them."),
        ],
        Lang::Zh => [
            format!("给{p}的消息草稿：“{project} 进展正常，有两个风险点。”"),
            format!("{svc_zh}服务的延迟飙升和 {hour} 点的发布时间吻合，建议查一下连接池。"),
            format!("{project} 进展小结：API 已完成，UI 进行中，没有阻塞。"),
            format!("```\n$ kubectl get pods -n {svc_en}\nNAME                 READY   STATUS    RESTARTS   AGE\n{svc_en}-7d9f8c-x2k4   1/1     Running   0          {age}h\n```"),
            format!("建议把{svc_zh}服务的重构拆成 {pods} 个小 PR，方便{p}评审。"),
        ],
    };
    rng.pick(&lines).clone()
}

fn personal_line(rng: &mut Rng, w: &World) -> String {
    let city = w.city(*rng.pick(&w.filler_cities));
    if rng.chance(0.3) {
        match w.lang {
            Lang::En => format!("Went to a concert in {city} on Saturday, totally worth the train ride."),
            Lang::Zh => format!("周六去{city}看了场演唱会，坐火车过去很值。"),
        }
    } else {
        pick(rng, w.lang, &PERSONAL_EN, &PERSONAL_ZH)
    }
}

/// One user line and the assistant's reply.
pub fn exchange(rng: &mut Rng, w: &World, distractors: &[&str]) -> (String, String) {
    let roll = rng.below(100);
    let user = match roll {
        0..=29 if !distractors.is_empty() => rng.pick(distractors).to_string(),
        0..=59 => work_line(rng, w),
        60..=84 => pick(rng, w.lang, &SMALL_TALK_EN, &SMALL_TALK_ZH),
        _ => personal_line(rng, w),
    };
    let assistant = match rng.below(100) {
        0..=34 => pick(rng, w.lang, &REPLIES_EN, &REPLIES_ZH),
        35..=59 => rng.pick(&CODE).to_string(),
        _ => work_reply(rng, w),
    };
    (user, assistant)
}
