//! The rule tables of the rules extractor: which sentences become cards, in which category and
//! at which priority.
//!
//! A sentence is classified in four steps, all on a width- and quote-folded copy (the card's
//! content stays the original sentence):
//! 1. **Lead-in**: discourse openers ("ok,", "btw", "also", "好的，", "对了", "另外") are skipped.
//! 2. **Vetoes**: questions (`?`, `？`, "吗/呢" at the end, "how/can you/是不是/怎么"), ephemeral
//!    talk ("let me check", "never mind", "I'll try that now", "我现在去试一下", "不要紧"),
//!    code and log lines, and a few false friends ("我是说…", "I'm a bit lost", "I like this")
//!    never become cards.
//! 3. **Memory marker**: "remember (that)", "don't forget", "keep in mind", "记住", "别忘了"
//!    raise the priority to [`EXPLICIT_PRIORITY`] and the rest of the sentence is classified;
//!    if no rule matches the rest, the card is an instruction (the user asked for it to be
//!    remembered, so it is kept).
//! 4. **Rules**, first match wins, in this order: persona, standing instructions addressed to
//!    the agent, work methods and decisions, tasks, other instructions, artifacts, episodes,
//!    work facts. The order settles overlaps: "we decided to use X" is a method before it is a
//!    fact, "我必须周五前完成迁移" a task before an instruction, "I created table X yesterday" an
//!    artifact before an episode.
//!
//! A rule marked `request` is a request to the agent ("please use…", "don't add…", "请用…").
//! Such a request is standing only if it names no specific object: with a deictic word in it
//! ("this", "that", "the following", "这", "上面") it is a one-off ("请用表格列出这三个方案") and
//! the rule does not fire.

use std::sync::LazyLock;

use regex::Regex;

use super::text::fold;
use crate::memory::Category;
use crate::memory::Category::{Episodic, Instruction, Persona, WorkArtifact, WorkFact, WorkMethod, WorkTask};

/// Priority of a card the user explicitly asked to be remembered, or stated as always/never.
pub const EXPLICIT_PRIORITY: u8 = 90;

/// One rule of the table.
pub(crate) struct RuleDef {
    pub name: &'static str,
    pub category: Category,
    pub priority: u8,
    pub pattern: &'static str,
    /// A second pattern the sentence must also match.
    pub also: Option<&'static str>,
    /// A pattern that, when it matches, stops this rule from firing.
    pub unless: Option<&'static str>,
    /// A request to the agent: a deictic word makes it a one-off.
    pub request: bool,
}

const fn rule(name: &'static str, category: Category, priority: u8, pattern: &'static str) -> RuleDef {
    RuleDef {
        name,
        category,
        priority,
        pattern,
        also: None,
        unless: None,
        request: false,
    }
}

impl RuleDef {
    const fn also(self, pattern: &'static str) -> Self {
        Self {
            also: Some(pattern),
            ..self
        }
    }

    const fn unless(self, pattern: &'static str) -> Self {
        Self {
            unless: Some(pattern),
            ..self
        }
    }

    const fn request(self) -> Self {
        Self { request: true, ..self }
    }
}

/// A past-tense verb or time word, for episodes anchored in the past.
const EN_PAST_VERB: &str = r"(?i)\b(?:was|were|had|did|went|got|came|broke|ran|took|saw|found|made|lost|hit|began|spent|told|said|paid|sent|fell|grew|\w{2,}ed)\b";
const ZH_EVENT: &str = r"了|过|出现|发生|宕机|挂|故障|失败|报警|告警|投诉|反馈|事故|完成|上线|遇到|碰到|丢|崩";

/// The rule table, in match order.
pub(crate) const RULE_DEFS: &[RuleDef] = &[
    // ---- Persona: who the user is.
    rule("en.name", Persona, 80, r"(?i)^(?:my\s+name\s+is|my\s+name's|call\s+me|i(?:'m|\s+am)\s+called)\b"),
    rule("en.role", Persona, 80, r"(?i)^i(?:'m|\s+am)\s+(?:(?:also|currently|now)\s+)?(?:a|an|the|one\s+of\s+the)\s+\S"),
    rule(
        "en.role_relation",
        Persona,
        80,
        r"(?i)^i(?:'m|\s+am)\s+(?:(?:currently|now|also)\s+)?(?:responsible\s+for|in\s+charge\s+of|on\s+the\s+|part\s+of|based\s+in|located\s+in|from\s+(?-i:[A-Z])|a\s+member\s+of|working\s+as|working\s+at|employed\s+(?:at|by)|the\s+owner\s+of)",
    ),
    rule("en.work", Persona, 80, r"(?i)^i\s+(?:currently\s+|now\s+|mainly\s+|mostly\s+)?work\s+(?:as|at|for|in|on|with|remotely)\b"),
    rule(
        "en.lead",
        Persona,
        80,
        r"(?i)^i\s+(?:lead|manage|head|oversee|own|maintain|run|support)\s+(?:\S+\s+){0,4}?(?:team|teams|group|department|org|squad|services?|platform|clusters?|infrastructure|infra|databases?|fleet|products?|projects?|on-call|region)\b",
    ),
    rule("en.live", Persona, 80, r"(?i)^i\s+(?:currently\s+)?live\s+in\b"),
    rule(
        "en.experience",
        Persona,
        80,
        r"(?i)^i(?:'ve|\s+have)\s+been\s+(?:a|an|working|doing|coding|programming|writing|using)\b",
    )
    .also(r"(?i)\b(?:years?|since|decades?)\b"),
    rule(
        "en.language",
        Persona,
        80,
        r"(?i)\bmy\s+(?:first|native|mother)\s+(?:language|tongue)\b|^i(?:'m|\s+am)\s+(?:a\s+)?native\b|^i\s+(?:speak|am\s+fluent\s+in)\b",
    ),
    rule(
        "en.my_role",
        Persona,
        80,
        r"(?i)^my\s+(?:role|job|job\s+title|title|position|background|timezone|time\s+zone|manager|boss|company|employer|pronouns)\s+(?:is|are)\b",
    ),
    rule("en.years", Persona, 80, r"(?i)\b\d+\+?\s+years\s+of\s+experience\b"),
    rule("zh.i_am", Persona, 80, r"(?:^|[，,；;])\s*我(?:是|叫|的名字是|名叫)"),
    rule(
        "zh.work_at",
        Persona,
        80,
        r"^我(?:目前|现在|现|之前|以前|一直|平时)?(?:在|于).{1,20}?(?:工作|上班|做|任职|实习|负责|当|从事|搞|写)",
    ),
    rule(
        "zh.responsible",
        Persona,
        80,
        r"^我(?:主要|目前|现在|平时|一直|日常|这边)?(?:负责|管理|分管|主管|带(?:团队|组|人|队))|^我(?:主要|平时|日常)管",
    ),
    rule("zh.main_duty", Persona, 75, r"(?:主要|平时|日常)(?:负责|管|做|搞|维护|支持|对接)"),
    rule(
        "zh.career",
        Persona,
        80,
        r"^我(?:刚|刚刚|之前|以前|原来|去年|今年|上个月|最近)?(?:转岗|入职|加入了?|毕业|跳槽|调到|转行|转到)",
    ),
    rule("zh.location", Persona, 80, r"^我(?:人在|目前人在|现在人在|住在|家在|常驻|base在|现在住在|目前住在)"),
    rule(
        "zh.experience",
        Persona,
        80,
        r"^我(?:做|干|搞|从事|写)(?:了)?.{0,12}?(?:\d+|[一二三四五六七八九十两几]+)(?:多)?年|(?:工作|从业)(?:了)?(?:\d+|[一二三四五六七八九十两几]+)(?:多)?年",
    ),
    rule(
        "zh.my",
        Persona,
        80,
        r"我的(?:时区|职位|岗位|角色|工作|职责|名字|专业|背景|团队|部门|母语|第一语言)(?:是|在)",
    ),
    // ---- Standing instructions addressed to the agent.
    rule("en.always_never", Instruction, 90, r"(?i)^(?:please\s+)?(?:always|never|don't\s+ever|do\s+not\s+ever)\b"),
    rule(
        "en.from_now_on",
        Instruction,
        85,
        r"(?i)^(?:please\s+)?(?:from\s+now\s+on|going\s+forward|in\s+(?:the\s+)?future|henceforth|for\s+all\s+future|by\s+default|as\s+a\s+rule)\b",
    ),
    rule(
        "en.you_must",
        Instruction,
        90,
        r"(?i)\byou\s+(?:must|should\s+always|should\s+never|must\s+never|need\s+to\s+always|always\s+need\s+to|are\s+not\s+allowed\s+to|may\s+never)\b",
    ),
    rule(
        "en.reply_language",
        Instruction,
        85,
        r"(?i)\b(?:reply|respond|answer|write|talk|speak|communicate)\s+(?:to\s+me\s+|with\s+me\s+)?in\s+(?:english|chinese|mandarin|spanish|french|german|japanese|korean|portuguese|russian|italian|plain\s+english|simplified\s+chinese|traditional\s+chinese)\b",
    ),
    rule(
        "zh.from_now_on",
        Instruction,
        85,
        r"^(?:请|麻烦)?(?:你)?(?:以后|今后|往后|将来|从现在(?:开始|起)|从今天(?:开始|起)|下次|每次|任何时候)",
    )
    .unless(r"再说|再聊|再看"),
    rule(
        "zh.please",
        Instruction,
        80,
        r"^(?:请|麻烦|劳驾)(?:你)?(?:以后|都|统一|一律|默认|尽量|始终|一直|务必)?(?:用|使用|以|保持|按照?|采用|回答|回复|说|写|输出|给出|称呼|叫)",
    )
    .request(),
    rule("zh.uniform", Instruction, 80, r"(?:统一|一律|默认|全部)(?:用|使用|采用|按|写成|格式化|输出)").request(),
    rule(
        "zh.reply_language",
        Instruction,
        85,
        r"(?:用|使用|说|以)(?:中文|英文|英语|汉语|普通话|日语|简体中文|繁体中文|简体|繁体)(?:来)?(?:回答|回复|交流|沟通|写|和我|跟我|答复|解释)",
    ),
    rule(
        "zh.answer_style",
        Instruction,
        80,
        r"^(?:回答|回复|解释|写代码|给我(?:的)?(?:代码|答案|回答|回复|SQL|sql|示例|方案|命令|脚本))(?:问题)?(?:时|的时候|的话)?(?:请|要|都|务必|尽量|最好|先|不要|别)",
    )
    .request(),
    // ---- Work methods: decisions, conventions, procedures.
    rule(
        "en.decided",
        WorkMethod,
        75,
        r"(?i)\b(?:we|i|the\s+team|our\s+team|everyone)\s+(?:have\s+|'ve\s+|had\s+|finally\s+|just\s+)?(?:decided|agreed|settled\s+on|chose|opted|committed|standardi[sz]ed\s+on|went\s+with)\b",
    ),
    rule(
        "en.lets_go_with",
        WorkMethod,
        75,
        r"(?i)^let(?:'s|\s+us)\s+(?:go\s+with|use|stick\s+with|stay\s+with|adopt|switch\s+to|standardi[sz]e\s+on|settle\s+on|keep\s+using)\b",
    ),
    rule(
        "en.policy",
        WorkMethod,
        70,
        r"(?i)\b(?:our|the\s+team's|my\s+team's)\s+(?:rule|policy|convention|standard|process|practice|workflow|approach|guideline|procedure|strategy|playbook|rule\s+of\s+thumb)\s+(?:is|for|says|requires)\b|^the\s+rule\s+is\b",
    ),
    rule(
        "en.we_always",
        WorkMethod,
        75,
        r"(?i)\bwe\s+(?:always|never|usually|typically|normally|generally|tend\s+to|prefer\s+to|only|don't\s+ever|do\s+not\s+ever)\b",
    ),
    rule(
        "en.every_must",
        WorkMethod,
        70,
        r"(?i)\b(?:every|each|all|any)\s+(?:\S+\s+){1,2}?(?:must|should|has\s+to|have\s+to|needs?\s+to)\b",
    ),
    rule(
        "en.steps",
        WorkMethod,
        70,
        r"(?i)^(?:we|i)\s+(?:always\s+|usually\s+)?(?:roll\s+out|deploy|release|ship|handle|review|test|migrate|back\s+up|do|run|apply|rotate|upgrade)\s+.*\b(?:in\s+(?:\w+\s+)?(?:steps|stages|phases|batches|waves)|first|then|via|through|using)\b",
    ),
    rule(
        "en.procedure",
        WorkMethod,
        70,
        r"(?i)^(?:the\s+)?(?:procedure|process|workflow|steps?)\s+(?:for|to)\s+.+\s+(?:is|are)\b|^(?:first|step\s+1)\b.*\bthen\b",
    ),
    rule(
        "zh.decided",
        WorkMethod,
        75,
        r"决定|商定|约定好|敲定|拍板|定下来|确定了|确定用|确定采用|达成一致",
    ),
    rule("zh.settled", WorkMethod, 75, r"^(?:那|那就|就这么|好|行)?[，,]?\s*定了"),
    rule("zh.just_use", WorkMethod, 75, r"^(?:那|那就|那我们|我们)?就(?:用|按|采用|选|走|上)"),
    rule(
        "zh.policy",
        WorkMethod,
        70,
        r"(?:规范|规定|原则|惯例|约定|流程|标准做法|做法|铁律|红线|规矩|制度)(?:是|：|:|为|就是|要求)",
    ),
    rule(
        "zh.we_usually",
        WorkMethod,
        75,
        r"我们(?:一般|通常|一般都|都是|一律|习惯|向来|一向|总是|从来不|从不|默认|统一|每次都)",
    ),
    rule("zh.first_then", WorkMethod, 70, r"(?:一般|通常|习惯|每次|都是|总是|一律)(?:会|都)?先.{1,30}?(?:再|然后|之后|最后)"),
    rule("zh.prefer_method", WorkMethod, 70, r"(?:优先|尽量)(?:用|使用|采用|走|选|考虑)"),
    rule("zh.steps", WorkMethod, 70, r"(?:分|按)\s*(?:[一二三四五两\d]+)\s*(?:步|个步骤|个阶段|批)"),
    // ---- Tasks: plans, commitments, deadlines.
    rule("en.todo", WorkTask, 70, r"(?i)^(?:todo|to-do|action\s+item|reminder\s+to\s+self|note\s+to\s+self)\b|^\[\s?\]"),
    rule("en.remind_me", WorkTask, 80, r"(?i)^(?:please\s+)?remind\s+me\b"),
    rule(
        "en.plan",
        WorkTask,
        65,
        r"(?i)\b(?:i|we)(?:'ll|\s+will|\s+am\s+going\s+to|'m\s+going\s+to|\s+are\s+going\s+to|'re\s+going\s+to|\s+plan\s+to|\s+am\s+planning\s+to|'m\s+planning\s+to|\s+are\s+planning\s+to|'re\s+planning\s+to|\s+need\s+to|\s+have\s+to|\s+must|\s+intend\s+to|'ve\s+got\s+to|\s+aim\s+to|\s+want\s+to|\s+still\s+need\s+to)\b",
    ),
    rule(
        "en.deadline",
        WorkTask,
        65,
        r"(?i)\b(?:by|before|until|due)\s+(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|tonight|eod|eow|cob|end\s+of\s+(?:the\s+)?(?:day|week|month|quarter|sprint|year)|next\s+\w+|the\s+(?:end|deadline|release|audit|launch|freeze|demo|review))\b|\b(?:deadline|due\s+date)\s+(?:is|for)\b",
    ),
    rule("zh.todo", WorkTask, 70, r"(?i)^(?:待办|待做|todo|to-?do|任务|备忘)\s*[：:]"),
    rule("zh.remind_me", WorkTask, 80, r"^(?:请|麻烦)?(?:你)?(?:记得)?提醒我"),
    rule(
        "zh.plan",
        WorkTask,
        65,
        r"打算|计划|准备|预计|安排|规划|想要在|要在|得在|需要在|必须在|争取",
    )
    // "执行计划" is a query plan; "不要在…" is a prohibition, not "要在" (a plan).
    .unless(r"准备好|计划外|没打算|不打算|没计划|没安排|执行计划|不要在|不需要在|不必在"),
    rule(
        "zh.when_todo",
        WorkTask,
        65,
        // A time ahead, then within the same clause a modal or an action.
        r"(?:明天|明早|后天|下周[一二三四五六日天末]?|下个?月|下个季度|下季度|月底|月初|年底|年前|节前|周[一二三四五六日末]|本周|这周|这个月|今晚|今天下午|[0-9一二三四五六七八九十]+号|[0-9一二三四五六七八九十]+月份?|双十一|双11|春节)(?:之前|前|以前|内|底)?[^，,。]{0,12}?(?:要|得|需要|必须|会|去|把|给|做|完成|上线|发布|搞定|写完|交|迁移|升级)",
    )
    // A time word before a past action is a report, not a plan ("10月我们完成了迁移").
    .unless(r"了|已经"),
    rule(
        "zh.i_must",
        WorkTask,
        65,
        r"^我(?:们)?(?:得|要|需要|必须|还得|还要|要先|得先)(?:把|去|在|给|先|赶紧|尽快|找|写|做|改|迁|升级|上线|准备)",
    ),
    // ---- Other instructions and preferences.
    rule(
        "en.prefer",
        Instruction,
        80,
        r"(?i)^i(?:'d\s+(?:much\s+)?(?:rather|prefer)|\s+(?:really\s+|strongly\s+|generally\s+|usually\s+|much\s+|definitely\s+|also\s+|personally\s+)?(?:prefer|like|love|hate|dislike|enjoy|can't\s+stand|cannot\s+stand|don't\s+like|do\s+not\s+like|don't\s+want|do\s+not\s+want|would\s+rather|would\s+prefer|favou?r))\b",
    ),
    rule("en.favourite", Instruction, 80, r"(?i)\bmy\s+(?:favou?rite|preferred|go-to|default|usual)\s+\S"),
    rule(
        "en.use_tool",
        Instruction,
        75,
        r"(?i)^i\s+(?:mostly\s+|mainly\s+|usually\s+|always\s+|only\s+|primarily\s+|exclusively\s+)?(?:use|code\s+in|write\s+in|work\s+in|program\s+in)\s+\S",
    ),
    rule(
        "en.when_you",
        Instruction,
        75,
        r"(?i)^(?:when(?:ever)?|if)\s+you\s+(?:give|write|show|answer|reply|suggest|recommend|generate|explain|send|use|create|provide|produce|review|refactor)\b",
    )
    .request(),
    rule(
        "en.dont",
        Instruction,
        80,
        r"(?i)^(?:please\s+)?(?:don't|do\s+not|stop|no\s+more)\s+(?:use|using|suggest|suggesting|give|giving|add|adding|include|including|write|writing|recommend|recommending|show|showing|put|putting|mention|mentioning|ask|asking|explain|explaining|apologi[sz]e|apologi[sz]ing|repeat|repeating|call|calling|assume|assuming|make|making|format|formatting)\b",
    )
    .request(),
    rule(
        "en.standing_imperative",
        Instruction,
        75,
        r"(?i)^(?:please\s+)?(?:keep|use|format|write|give|answer|reply|assume|prefer|stick\s+to|default\s+to|avoid|include|add|show|put|respond|explain|label|sort|name|prefix|end|start|mark)\b.*\b(?:always|every\s+time|each\s+time|by\s+default|for\s+me|all\s+(?:your|my|future)|in\s+(?:all|your|every|any|future)\s+(?:answers?|examples?|replies|responses|code|snippets?|samples?|messages?|outputs?)|from\s+now\s+on|whenever|every\s+(?:answer|example|reply|response|snippet|script|query|message))\b",
    )
    .request(),
    rule("en.avoid", Instruction, 75, r"(?i)^(?:please\s+)?(?:avoid|stick\s+to|default\s+to)\s+\S").request(),
    rule(
        "en.keep_language",
        Instruction,
        75,
        r"(?i)^(?:please\s+)?(?:keep|write|put|leave|make|do)\s+.*\bin\s+(?:english|chinese|mandarin|spanish|french|german|japanese|korean|plain\s+english)\b",
    )
    .request(),
    rule(
        "zh.never",
        Instruction,
        90,
        r"^(?:请|麻烦|你)?(?:千万|绝对|永远|一律|始终|务必|以后)?(?:不要|别|不许|不准|禁止|不能|不可以|不得|勿)",
    )
    .request(),
    rule(
        "zh.must",
        Instruction,
        90,
        r"务必|必须|一定要|始终|总是要|永远|一律|绝对不能|绝对不要|千万不要|千万别|每次都要|不准|不许|禁止",
    ),
    rule(
        "zh.prefer",
        Instruction,
        80,
        r"^我(?:比较|更|很|非常|最|一直|一般|特别|真的|也|还是)?(?:喜欢|偏好|偏爱|倾向于?|爱用|讨厌|不喜欢|不太喜欢|不习惯|受不了|习惯)",
    ),
    rule("zh.my_preference", Instruction, 80, r"我的(?:习惯|偏好|喜好|风格|要求)是"),
    rule("zh.use_tool", Instruction, 75, r"^我(?:一般|平时|主要|通常|常|都|日常|一直|习惯)(?:用|使用)|我(?:常用|最常用|惯用)的?"),
    // ---- Artifacts: things made or changed.
    rule(
        "en.made",
        WorkArtifact,
        55,
        r"(?i)^(?:(?:yesterday|today|this\s+morning|last\s+\w+|earlier)\s*,?\s+)?(?:i|we)(?:'ve|\s+have)?\s+(?:just\s+|already\s+|finally\s+|also\s+)?(?:created|wrote|added|built|made|set\s+up|pushed|committed|deployed|published|uploaded|generated|drafted|configured|renamed|moved|deleted|dropped|merged|opened|filed|released|shipped|installed|provisioned|documented|exported|scheduled|enabled|disabled|rewrote|refactored|migrated\s+the|upgraded\s+the|changed\s+the|updated\s+the|bumped|tagged|forked|cloned|archived)\b",
    ),
    rule(
        "en.located",
        WorkArtifact,
        55,
        r"(?i)\b(?:runbook|doc|docs|document|design\s+doc|spec|dashboard|script|notebook|spreadsheet|repo|repository|readme|wiki\s+page|playbook|template|config|ticket|pr|pull\s+request|branch|bucket|backups?|dump|diagram|slides|deck|report|files?|code)\b.{0,40}?\b(?:is|are|lives|live|sits|sit|can\s+be\s+found|is\s+stored|are\s+stored|is\s+saved|are\s+saved|is\s+kept|are\s+kept)\s+(?:in|at|under|on|inside)\b",
    ),
    rule(
        "zh.made",
        WorkArtifact,
        55,
        r"(?:我|我们|刚|刚刚|已经|昨天|今天|上午|下午)[^，,。]{0,20}?(?:创建了|建了|新建了?|写了|加了|添加了|增加了|上线了|提交了|部署了|改成了|改为了?|改了|配置了|生成了|删除了|删了|搭了|搭建了|发布了|建好了|写好了|做了一个|整理了|导出了|迁移了|开了一个|申请了|升级了|重写了|合并了)",
    ),
    rule(
        "zh.placed",
        WorkArtifact,
        55,
        r"(?i)(?:文档|脚本|代码|配置|文件|方案|面板|报告|备份|镜像|链接|笔记|手册|runbook|wiki|表|dashboard)[^，,。]{0,10}?(?:放在|存在|存放在|上传到|提交到|推到|传到|挂在|保存在|放到|归档在)",
    )
    // Someone put it there ("我放在…了"); "代码都放在 GitLab 上" is how things are, a fact.
    .also(r"了|刚|已经|我[^们]"),
    // ---- Episodes: something that happened, anchored in the past.
    rule(
        "en.past",
        Episodic,
        55,
        r"(?i)\b(?:yesterday|last\s+(?:night|week|month|year|time|weekend|sprint|quarter|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|this\s+(?:morning|afternoon)|earlier\s+(?:today|this\s+(?:week|month|year))|(?:two|three|four|five|a\s+few|several|\d+)\s+(?:days|weeks|months|years)\s+ago|on\s+(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d{1,2}(?:st|nd|rd|th)?)|in\s+(?:19|20)\d{2}|back\s+in\s+\S+|(?:19|20)\d{2}-\d{2}-\d{2})\b",
    )
    .also(EN_PAST_VERB),
    rule(
        "en.incident",
        Episodic,
        55,
        r"(?i)^(?:we|i)\s+(?:had|hit|got|ran\s+into|experienced|suffered)\s+(?:an?\s+|another\s+|the\s+same\s+|two\s+|three\s+)?(?:\S+\s+)?(?:outage|incident|bug|issue|problem|failure|data\s+loss|breach|downtime|regression)\b",
    ),
    rule(
        "zh.past",
        Episodic,
        55,
        r"昨天|昨晚|前天|上周[一二三四五六日末]?|上个?月|上次|上回|去年|前年|今天(?:早上|上午|凌晨)|今早|今天凌晨|那天|当时|之前有一次|有一次|\d{4}\s*年|\d{1,2}\s*月\s*\d{1,2}\s*[日号]|\d{4}-\d{1,2}-\d{1,2}|\d+\s*(?:天|周|个月|年)前|(?:几|两|三|半)(?:天|周|个月|年)前|凌晨",
    )
    .also(ZH_EVENT),
    // ---- Work facts: how the user's work and environment are.
    rule(
        "en.our_x_is",
        WorkFact,
        60,
        r"(?i)^(?:our|my\s+team's|our\s+team's|the\s+company's|my\s+company's)\s+(?:\S+\s+){0,6}?(?:is|are|runs|run|has|have|uses|use|sits|lives|was|were|contains|holds|handles|serves|processes|costs|takes)\b",
    ),
    rule(
        "en.we_use",
        WorkFact,
        60,
        r"(?i)^we(?:'re|\s+are)?\s+(?:currently\s+|mostly\s+|mainly\s+|still\s+|also\s+|all\s+|now\s+|primarily\s+)?(?:use|run|host|deploy|store|keep|rely\s+on|on|using|running|hosted|deployed|have|own|maintain|build|develop|ship|sell|serve|support|operate|pay\s+for)\b",
    ),
    rule(
        "en.the_system",
        WorkFact,
        60,
        r"(?i)^the\s+(?:\S+\s+){0,3}?(?:table|tables|database|db|cluster|service|server|instance|environment|env|bucket|queue|topic|repo|repository|api|gateway|pipeline|job|region|nodes?|replicas?|schema|index|app|application|system|stack|backend|frontend|network|vpc|budget|sla|slo|limit|quota)\b.{0,60}?\b(?:is|are|has|have|runs|run|uses|use|shares|contains|holds|stores|sits|lives|was|takes|handles|serves|costs|needs|requires|depends|talks|connects)\b",
    ),
    rule("en.we_are_a", WorkFact, 60, r"(?i)^we(?:'re|\s+are)\s+(?:a|an)\s+\S"),
    rule(
        "zh.we_use",
        WorkFact,
        60,
        r"^(?:我们|公司|团队|我们公司|我们团队|我们组|组里|项目里?|线上|这边|我们这边)(?:现在|目前|主要|一直|都|也|内部|统一)?(?:用|使用|采用|在用|跑在|部署在|用的是|基于|依赖)",
    ),
    rule(
        "zh.our_x",
        WorkFact,
        60,
        r"^(?:我们|公司|团队|我们公司|我们团队|我们组|组里|我们部门)(?:的)?.{1,20}?(?:是|用的是|都是|有|部署在|跑在|放在|叫|为|基于|大概|一共|总共)",
    ),
    rule("zh.environment", WorkFact, 60, r"(?:生产|测试|预发|线上|开发|灰度|正式|准生产|本地)(?:环境|库|集群)")
        .also(r"是|在|都|用|共用|部署|跑|有|连"),
    rule(
        "zh.size",
        WorkFact,
        60,
        r"(?i)(?:表|库|集群|实例|数据量|qps|tps|机器|节点|用户量|日活|dau)(?:现在|目前)?(?:大概|大约|一共|总共)?(?:有|是|达到|超过|在)\s*(?:大概|大约|约)?[\d一二三四五六七八九十两百千万亿几]",
    ),
    rule(
        "zh.thing_is",
        WorkFact,
        60,
        r"^(?:主库|从库|数据库|生产库|线上库|集群|时区|版本|默认端口|端口|域名|网关|缓存|消息队列|注册中心|配置中心|监控|日志)(?:的)?(?:版本|地址)?(?:是|用的是|在|部署在)",
    ),
];

/// Never a card, whatever the rules say.
pub(crate) const VETOES: &[(&str, &str)] = &[
    ("question_mark", r#"[?？]\s*["'”’)）]*\s*$"#),
    ("zh_question_particle", r"(?:吗|么|嘛|呢)\s*[。！!~～.]*\s*$"),
    (
        "en_question_start",
        r"(?i)^(?:how|what|what's|whats|why|where|which|who|whom|whose|can\s+(?:you|i|we|u)|could\s+(?:you|i|we|u)|would\s+(?:you|it|u)|will\s+you|do\s+(?:you|i|we|u)|does|did|is\s+(?:it|there|this|that)|are\s+(?:there|you|we|these|those)|should\s+(?:i|we)|shall\s+(?:i|we)|may\s+i|have\s+you|has\s+(?:anyone|it))\b",
    ),
    (
        "zh_question_word",
        r"是不是|能不能|可不可以|有没有|要不要|行不行|对不对|好不好|会不会|怎么|怎样|为什么|为啥|如何|哪个|哪些|哪里|哪儿|什么时候|多少|什么意思|是什么|干嘛|咋",
    ),
    (
        "en_ephemeral",
        r"(?i)\b(?:never\s*mind|nvm|no\s+worries|don't\s+worry|brb|be\s+right\s+back|let\s+me|get\s+back\s+to\s+you)\b|\bi(?:'ll|\s+will|'m\s+going\s+to|\s+am\s+going\s+to|'m\s+gonna|\s+am\s+gonna)\s+(?:try|check|test|look|see|think|read|go\s+(?:and|to)\s+(?:try|check|look|grab|get))\b|\b(?:need|want)\s+to\s+(?:know|understand|figure\s+out|learn|ask)\b|\b(?:right\s+)?now\s*[.!]*$|\bin\s+a\s+(?:sec|second|minute|bit|moment)\b",
    ),
    (
        "en_one_off_taste",
        r"(?i)^i\s+(?:really\s+)?(?:like|love|hate|prefer)\s+(?:this|that|it|these|those|your|the\s+(?:first|second|third|last|new|previous|other|above)|option|version)\b",
    ),
    (
        "en_passing_state",
        r"(?i)^i(?:'m|\s+am)\s+(?:a\s+(?:bit|little|lot|tad)|kind\s+of|sort\s+of|not\s+sure|just\s+)\b",
    ),
    (
        "zh_ephemeral",
        r"^(?:不要紧|没关系|别急|别着急|不用了|不用谢|不客气|别担心|不要担心|稍等|等一下|等等|算了)|^(?:我|让我)[^，,。]{0,6}(?:试|看|查|等|想|问|研究|检查|确认)一下|下班|去吃饭|待会|一会儿再|回头再|再说吧|先这样",
    ),
    (
        "zh_not_a_self_statement",
        r"我是(?:说|指|想|问|觉得|不是|否|在|来|刚|不|真的|有点|为了|故意|认真的)|我是不是",
    ),
    (
        "code_or_log",
        r"(?i)^(?:select|insert\s+into|update\s+\S+\s+set|delete\s+from|create\s+(?:table|index|unique|view|database|or\s+replace)|alter\s+table|drop\s+(?:table|index|database)|def\s|fn\s|func\s|class\s|import\s|from\s+\S+\s+import|for\s+\w+\s+in\s|if\s*\(|\$\s|#include|curl\s|git\s|kubectl\s|docker\s|sudo\s|npm\s|pip\s|cargo\s|at\s+[\w.$]+\()|^(?:error|warning|warn|fatal|panic|traceback|exception)\s*[:(\[0-9]|[;{}]\s*$|=>|::",
    ),
];

/// Discourse openers skipped before matching.
pub(crate) const LEAD_IN: &str = r"^(?:(?i:(?:ok(?:ay)?|oh|also|and|so|btw|by\s+the\s+way|fyi|actually|well|anyway|anyways|just\s+so\s+you\s+know|for\s+(?:your\s+)?(?:info|information|reference)|ps|one\s+more\s+thing|hi|hey|hello|yes|yeah|yep|sure|great|thanks|thank\s+you|got\s+it|cool|alright|oh\s+and|plus|besides)\b)[\s,;:.!—–-]*|(?:好的|好|嗯+|哦|噢|喔|对|是的|没错|行|可以|谢谢|收到|明白|了解|嗨|你好)[\s，,：:。！!、~～]+|(?:对了|另外|还有就是|还有|顺便说一下|顺便提一下|顺便说一句|顺便|补充一下|补充一点|其实|然后|话说|跟你说一下|说一下|告诉你|提一下|说明一下|我想说)[\s，,：:。！!、~～]*)+";

/// "Remember that …": the rest is the memory, at explicit priority.
pub(crate) const MEMORY_MARKER: &str = r"^(?:(?i:(?:please\s+|pls\s+)?(?:remember|don't\s+forget|do\s+not\s+forget|never\s+forget|keep\s+in\s+mind|note\s+that|make\s+a\s+note(?:\s+that)?|for\s+the\s+record|for\s+future\s+reference)(?:\s+that|\s+this)?\b)[\s,:;.!—–-]*|(?:请|你)?(?:记住|记好|记得|别忘了|别忘记|不要忘了|不要忘记|千万记得|千万别忘了|牢记|务必记住|你要记住)(?:了|哦|啊|喔)?[\s，,：:。！!、]*)";

/// Words that point at something in the conversation, making a request a one-off.
pub(crate) const DEICTIC: &str =
    r"(?i)\b(?:this|that|these|those|the\s+following|above|below|here|it)\b|这|那|上面|下面|以下|上述|刚才|刚刚|它";

struct Compiled {
    def: &'static RuleDef,
    pattern: Regex,
    also: Option<Regex>,
    unless: Option<Regex>,
}

struct Tables {
    rules: Vec<Compiled>,
    vetoes: Vec<Regex>,
    lead_in: Regex,
    marker: Regex,
    deictic: Regex,
}

fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| panic!("invalid rules pattern {pattern:?}: {e}"))
}

static TABLES: LazyLock<Tables> = LazyLock::new(|| Tables {
    rules: RULE_DEFS
        .iter()
        .map(|def| Compiled {
            def,
            pattern: compile(def.pattern),
            also: def.also.map(compile),
            unless: def.unless.map(compile),
        })
        .collect(),
    vetoes: VETOES.iter().map(|(_, p)| compile(p)).collect(),
    lead_in: compile(LEAD_IN),
    marker: compile(MEMORY_MARKER),
    deictic: compile(DEICTIC),
});

/// What the rules make of one sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    pub category: Category,
    pub priority: u8,
    /// The rule that fired (`marker` when only a memory marker did), for diagnostics.
    pub rule: &'static str,
}

/// Classifies one sentence (as cut by `split_sentences`), or `None` when it is no memory.
pub fn classify_sentence(sentence: &str) -> Option<Classified> {
    let tables = &*TABLES;
    let folded = fold(sentence);
    let lead = tables
        .lead_in
        .find(&folded)
        .map_or(folded.as_str(), |m| &folded[m.end()..]);
    if tables.vetoes.iter().any(|v| v.is_match(lead)) {
        return None;
    }
    let (body, explicit) = match tables.marker.find(lead) {
        Some(m) => (&lead[m.end()..], true),
        None => (lead, false),
    };
    let fired = tables.rules.iter().find(|r| {
        r.pattern.is_match(body)
            && r.also.as_ref().is_none_or(|re| re.is_match(body))
            && r.unless.as_ref().is_none_or(|re| !re.is_match(body))
            && !(r.def.request && tables.deictic.is_match(body))
    });
    match fired {
        Some(r) => Some(Classified {
            category: r.def.category,
            priority: if explicit {
                r.def.priority.max(EXPLICIT_PRIORITY)
            } else {
                r.def.priority
            },
            rule: r.def.name,
        }),
        None if explicit && body.chars().filter(|c| c.is_alphanumeric()).count() >= 3 => Some(Classified {
            category: Category::Instruction,
            priority: EXPLICIT_PRIORITY,
            rule: "marker",
        }),
        None => None,
    }
}

/// A stable text of every table, for the provenance hash.
pub(crate) fn describe(out: &mut String) {
    use std::fmt::Write as _;
    for def in RULE_DEFS {
        let _ = writeln!(
            out,
            "rule {} {} {} {:?} also={:?} unless={:?} request={}",
            def.name,
            def.category.as_str(),
            def.priority,
            def.pattern,
            def.also,
            def.unless,
            def.request
        );
    }
    for (name, pattern) in VETOES {
        let _ = writeln!(out, "veto {name} {pattern:?}");
    }
    let _ = writeln!(
        out,
        "lead_in {LEAD_IN:?}\nmarker {MEMORY_MARKER:?}\ndeictic {DEICTIC:?}"
    );
    let _ = writeln!(out, "explicit_priority {EXPLICIT_PRIORITY}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles_and_names_are_unique() {
        assert!(!TABLES.rules.is_empty());
        let mut names: Vec<_> = RULE_DEFS.iter().map(|d| d.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "duplicate rule names");
    }

    /// (sentence, expected category, or `None` for no card).
    const CASES: &[(&str, Option<Category>)] = &[
        ("我是腾讯云 DBA，主要管北京区的 TDSQL-C", Some(Persona)),
        ("I'm a data engineer at Acme.", Some(Persona)),
        ("I’m responsible for the payments API.", Some(Persona)),
        ("好的，我叫李雷。", Some(Persona)),
        ("I prefer short answers.", Some(Instruction)),
        ("Always answer in English.", Some(Instruction)),
        ("请用中文回答。", Some(Instruction)),
        ("请用表格列出这三个方案的区别。", None),
        ("不要给我推荐收费工具。", Some(Instruction)),
        ("不要紧，我自己来。", None),
        ("Remember that our staging DB is shared with QA.", Some(WorkFact)),
        ("记住，周五前要交报告。", Some(WorkTask)),
        ("Remember to always run migrations in a transaction.", Some(Instruction)),
        ("We decided to use Kafka.", Some(WorkMethod)),
        ("我们决定用双写做迁移。", Some(WorkMethod)),
        ("I need to rotate the keys by Friday.", Some(WorkTask)),
        ("明天要给实例 A 做备份。", Some(WorkTask)),
        ("I created the order_archive table.", Some(WorkArtifact)),
        ("我写了一个备份脚本。", Some(WorkArtifact)),
        ("Yesterday the primary database crashed.", Some(Episodic)),
        ("上周五支付服务宕机了半小时。", Some(Episodic)),
        ("Our main database is PostgreSQL 15.", Some(WorkFact)),
        ("我们用 Kafka 做消息队列。", Some(WorkFact)),
        ("How do I create an index?", None),
        ("Can you always answer in English", None),
        ("我是说第二个参数。", None),
        ("这个报错是什么意思", None),
        ("I'm going to try that now.", None),
        ("Never mind, I found it.", None),
        ("SELECT * FROM orders;", None),
        ("ok thanks", None),
        ("你还记得我们上次聊的吗？", None),
    ];

    #[test]
    fn classifies_representative_sentences() {
        for (sentence, expected) in CASES {
            let got = classify_sentence(sentence);
            assert_eq!(got.map(|c| c.category), *expected, "{sentence:?} -> {got:?}");
        }
    }

    #[test]
    fn explicit_markers_raise_priority() {
        let plain = classify_sentence("Our staging DB is shared with QA.").expect("a card");
        let marked = classify_sentence("Remember that our staging DB is shared with QA.").expect("a card");
        assert_eq!(plain.category, marked.category);
        assert!(plain.priority < EXPLICIT_PRIORITY);
        assert_eq!(marked.priority, EXPLICIT_PRIORITY);
        assert_eq!(
            classify_sentence("Never push to main directly.").map(|c| c.priority),
            Some(EXPLICIT_PRIORITY)
        );
        assert_eq!(
            classify_sentence("别忘了：备份前先停写").map(|c| c.priority),
            Some(EXPLICIT_PRIORITY)
        );
    }
}
