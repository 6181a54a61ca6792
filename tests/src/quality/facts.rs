//! The facts each owner states once, the questions asked about them later, and the
//! distractor lines that reuse their vocabulary without answering them.
//!
//! Every fact type exists in English and Chinese; an owner states facts in their own language
//! and is asked mostly in it, plus a few questions in the other one (cross-language).

use chrono::{Datelike, Days, NaiveDate};

use super::dataset::{Lang, QuestionKind, Role};
use crate::rng::Rng;

/// A run of consecutive turns placed in one session, starting with a user turn.
#[derive(Debug, Clone)]
pub struct Block {
    pub session: usize,
    pub turns: Vec<(Role, String)>,
    /// Positions in `turns` that carry the fact.
    pub evidence: Vec<usize>,
}

#[derive(Debug, Clone)]
pub struct QSpec {
    pub kind: QuestionKind,
    pub lang: Lang,
    pub text: String,
    /// Indexes into the fact's blocks; their evidence turns answer the question.
    pub blocks: Vec<usize>,
    pub answer: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Fact {
    pub blocks: Vec<Block>,
    pub questions: Vec<QSpec>,
    /// User lines sprinkled over all sessions: same topic and words, no answer.
    pub distractors: Vec<String>,
}

pub const MONTHS_EN: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

const OWNER_NAMES_EN: [&str; 10] = [
    "Alice", "Ben", "Carmen", "Dev", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jakob",
];
const OWNER_NAMES_ZH: [&str; 6] = ["林晓", "陈宇", "王芳", "杨帆", "徐静", "马超"];
const PEOPLE_EN: [&str; 16] = [
    "Priya", "Marco", "Lena", "Tomás", "Aiko", "Jonas", "Fatima", "Oliver", "Sofia", "Kwame", "Ingrid", "Rahul",
    "Chloé", "Mateo", "Hana", "Diego",
];
const PEOPLE_ZH: [&str; 14] = [
    "王磊", "李娜", "张伟", "陈静", "刘洋", "赵敏", "孙浩", "周婷", "吴昊", "郑爽", "何佳", "高翔", "罗琳", "梁宇",
];
const PROJECTS: [&str; 12] = [
    "Falcon", "Heron", "Atlas", "Nimbus", "Orion", "Kestrel", "Meridian", "Tundra", "Beacon", "Cobalt", "Lumen",
    "Quartz",
];
/// (English, Chinese) service names; English ones read "the billing service".
const SERVICES: [(&str, &str); 8] = [
    ("billing", "计费"),
    ("search", "搜索"),
    ("auth", "认证"),
    ("notifications", "通知"),
    ("reporting", "报表"),
    ("payments", "支付"),
    ("ingestion", "数据接入"),
    ("checkout", "结算"),
];
pub const DATABASES: [&str; 9] = [
    "PostgreSQL",
    "MySQL",
    "MongoDB",
    "Cassandra",
    "DynamoDB",
    "CockroachDB",
    "ScyllaDB",
    "TiDB",
    "SQLite",
];
const CITIES: [(&str, &str); 18] = [
    ("Lisbon", "里斯本"),
    ("Porto", "波尔图"),
    ("Berlin", "柏林"),
    ("Toronto", "多伦多"),
    ("Melbourne", "墨尔本"),
    ("Kyoto", "京都"),
    ("Austin", "奥斯汀"),
    ("Edinburgh", "爱丁堡"),
    ("Valencia", "瓦伦西亚"),
    ("Copenhagen", "哥本哈根"),
    ("Hangzhou", "杭州"),
    ("Chengdu", "成都"),
    ("Shenzhen", "深圳"),
    ("Xiamen", "厦门"),
    ("Nanjing", "南京"),
    ("Suzhou", "苏州"),
    ("Qingdao", "青岛"),
    ("Dalian", "大连"),
];
/// (young, adult) in English, then in Chinese.
const SPECIES: [(&str, &str, &str, &str); 3] = [
    ("puppy", "dog", "小狗", "狗"),
    ("kitten", "cat", "小猫", "猫"),
    ("bunny", "rabbit", "小兔子", "兔子"),
];
const PET_NAMES_EN: [&str; 14] = [
    "Biscuit",
    "Pepper",
    "Waffles",
    "Juniper",
    "Pickles",
    "Nugget",
    "Marbles",
    "Clementine",
    "Rocket",
    "Pumpkin",
    "Noodle",
    "Bramble",
    "Ziggy",
    "Truffle",
];
const PET_NAMES_ZH: [&str; 10] = [
    "豆豆", "旺财", "糯米", "布丁", "可乐", "团子", "元宝", "年糕", "奶茶", "汤圆",
];
const ALLERGENS: [(&str, &str); 7] = [
    ("peanuts", "花生"),
    ("shellfish", "贝类海鲜"),
    ("sesame", "芝麻"),
    ("kiwi", "猕猴桃"),
    ("eggs", "鸡蛋"),
    ("soy", "大豆"),
    ("walnuts", "核桃"),
];
const SCRIPT_LANGUAGES: [&str; 9] = [
    "Python",
    "Ruby",
    "Go",
    "TypeScript",
    "Kotlin",
    "Elixir",
    "Lua",
    "Perl",
    "Julia",
];
const EDITORS: [&str; 8] = [
    "Helix",
    "Zed",
    "Neovim",
    "Emacs",
    "VS Code",
    "Sublime Text",
    "IntelliJ IDEA",
    "Kakoune",
];
const REASONS: [(&str, &str); 5] = [
    ("strong transactions", "强事务"),
    ("cheap horizontal scaling", "低成本的水平扩展"),
    ("fast analytical queries", "快速的分析查询"),
    ("a flexible document schema", "灵活的文档结构"),
    ("something the team already knows", "团队已经熟悉的技术"),
];
const SYSTEMS: [(&str, &str); 6] = [
    ("orders database", "订单库"),
    ("search cluster", "搜索集群"),
    ("CI runners", "CI 构建机"),
    ("message queue", "消息队列"),
    ("object storage", "对象存储"),
    ("DNS setup", "DNS 配置"),
];
/// (subject, first decision, later decision), each in English then Chinese.
type Subject = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);
const SUBJECTS: [Subject; 6] = [
    (
        "deployment platform",
        "部署平台",
        "stay on plain VMs managed with Ansible",
        "继续用 Ansible 管理虚拟机",
        "move every service to Kubernetes",
        "把所有服务迁到 Kubernetes 上",
    ),
    (
        "frontend framework",
        "前端框架",
        "keep patching the old Angular app",
        "继续修补旧的 Angular 应用",
        "rewrite the dashboard in Svelte",
        "用 Svelte 重写控制台",
    ),
    (
        "on-call rotation",
        "值班安排",
        "keep the weekly rotation inside the team",
        "保持团队内部每周轮换",
        "switch to follow-the-sun with the Singapore team",
        "和新加坡团队按时区接力值班",
    ),
    (
        "analytics database",
        "分析数据库",
        "keep reporting on the MySQL replicas",
        "继续在 MySQL 从库上出报表",
        "move analytics to ClickHouse",
        "把分析迁到 ClickHouse",
    ),
    (
        "logging stack",
        "日志系统",
        "stick with ELK",
        "继续用 ELK",
        "replace it with Loki and Grafana",
        "换成 Loki 加 Grafana",
    ),
    (
        "release cadence",
        "发布节奏",
        "release every two weeks",
        "两周发一次版",
        "ship continuously behind feature flags",
        "用功能开关持续发布",
    ),
];
const SKILLS: [(&str, &str); 6] = [
    ("Terraform", "Terraform"),
    ("async Rust", "Rust 异步编程"),
    ("data visualisation with D3", "用 D3 做数据可视化"),
    ("Kubernetes operators", "Kubernetes Operator 开发"),
    ("conversational Spanish", "西班牙语口语"),
    ("SQL query tuning", "SQL 查询调优"),
];
const VENUES: [(&str, &str); 4] = [
    ("the internal tech day", "公司内部技术日"),
    ("the local Rust meetup", "本地 Rust 聚会"),
    ("the platform guild", "平台技术小组"),
    ("the spring engineering all-hands", "春季工程全员大会"),
];
const COFFEES: [(&str, &str); 6] = [
    ("oat flat white", "燕麦拿铁"),
    ("double espresso", "双份浓缩"),
    ("iced americano", "冰美式"),
    ("cortado", "可塔多"),
    ("chai latte with oat milk", "燕麦奶印度茶拿铁"),
    ("matcha latte", "抹茶拿铁"),
];
const SISTERS_EN: [&str; 6] = ["Emma", "Nora", "Julia", "Mia", "Clara", "Lucy"];
const SISTERS_ZH: [&str; 5] = ["小雨", "小雪", "婷婷", "佳佳", "小敏"];
/// Never 5432 or a number the filler prints, so the port is stated by its fact only.
const PORTS: [&str; 6] = ["6432", "5433", "15432", "25060", "3307", "27018"];

const ACKS_EN: [&str; 6] = [
    "Noted, I'll keep that in mind.",
    "Got it.",
    "Thanks for letting me know!",
    "Good to know.",
    "Understood — I've made a note.",
    "Okay, noted for later.",
];
const ACKS_ZH: [&str; 5] = [
    "记下了。",
    "好的，我记住了。",
    "收到，谢谢告诉我！",
    "了解。",
    "好的，已经记录。",
];

/// The cast and vocabulary of one owner's conversations.
#[derive(Debug, Clone)]
pub struct World {
    pub lang: Lang,
    pub name: String,
    pub people: Vec<String>,
    pub projects: Vec<String>,
    /// (English, Chinese) names.
    pub services: Vec<(&'static str, &'static str)>,
    /// Cities the filler mentions; facts take their cities from the others.
    pub filler_cities: Vec<(&'static str, &'static str)>,
    fact_cities: Vec<(&'static str, &'static str)>,
    pub dates: Vec<NaiveDate>,
}

impl World {
    pub fn new(rng: &mut Rng, lang: Lang, index: usize, dates: Vec<NaiveDate>) -> Self {
        let name = match lang {
            Lang::En => OWNER_NAMES_EN[index % OWNER_NAMES_EN.len()],
            Lang::Zh => OWNER_NAMES_ZH[index % OWNER_NAMES_ZH.len()],
        };
        let people = match lang {
            Lang::En => rng.sample(&PEOPLE_EN, 7),
            Lang::Zh => rng.sample(&PEOPLE_ZH, 7),
        };
        let mut cities = rng.sample(&CITIES, 7);
        let fact_cities = cities.split_off(3);
        Self {
            lang,
            name: name.to_string(),
            people: people.into_iter().map(String::from).collect(),
            projects: rng.sample(&PROJECTS, 3).into_iter().map(String::from).collect(),
            services: rng.sample(&SERVICES, 4),
            filler_cities: cities,
            fact_cities,
            dates,
        }
    }

    pub fn city(&self, city: (&'static str, &'static str)) -> &'static str {
        match self.lang {
            Lang::En => city.0,
            Lang::Zh => city.1,
        }
    }

    pub fn service(&self, service: (&'static str, &'static str)) -> String {
        match self.lang {
            Lang::En => format!("the {} service", service.0),
            Lang::Zh => format!("{}服务", service.1),
        }
    }
}

pub fn iso(d: NaiveDate) -> String {
    d.format("%Y-%m-%d").to_string()
}

fn zh_date(d: NaiveDate) -> String {
    format!("{}年{}月{}日", d.year(), d.month(), d.day())
}

fn en_month_day(d: NaiveDate) -> String {
    format!("{} {}", MONTHS_EN[d.month0() as usize], d.day())
}

fn zh_month_day(d: NaiveDate) -> String {
    format!("{}月{}日", d.month(), d.day())
}

fn month_en(d: NaiveDate) -> &'static str {
    MONTHS_EN[d.month0() as usize]
}

/// "a" or "an" before `word`.
fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

fn month_zh(d: NaiveDate) -> String {
    format!("{}月", d.month())
}

/// Builds the facts of one owner.
struct Ctx<'a> {
    rng: &'a mut Rng,
    world: &'a World,
    used_dates: Vec<NaiveDate>,
}

impl Ctx<'_> {
    fn lang(&self) -> Lang {
        self.world.lang
    }

    fn say(&self, en: String, zh: String) -> String {
        match self.lang() {
            Lang::En => en,
            Lang::Zh => zh,
        }
    }

    fn ack(&mut self) -> String {
        match self.lang() {
            Lang::En => self.rng.pick(&ACKS_EN).to_string(),
            Lang::Zh => self.rng.pick(&ACKS_ZH).to_string(),
        }
    }

    /// A session in the first ~45% of the owner's history.
    fn early(&mut self) -> usize {
        self.rng.below((self.world.dates.len() * 45 / 100).max(1))
    }

    /// A session in 55%..85% of the history: still well before the questions.
    fn late(&mut self) -> usize {
        let n = self.world.dates.len();
        self.rng.range(n * 55 / 100, (n * 85 / 100).max(n * 55 / 100))
    }

    fn date(&self, session: usize) -> NaiveDate {
        self.world.dates[session]
    }

    /// A date `offset` days from `base`, moved to a day no other fact uses, so that a date
    /// names one event only.
    fn unique_date(&mut self, base: NaiveDate, offset: i64, latest: NaiveDate) -> NaiveDate {
        let mut d = if offset >= 0 {
            base + Days::new(offset as u64)
        } else {
            base - Days::new(offset.unsigned_abs())
        };
        d = d.min(latest);
        while self.used_dates.contains(&d) {
            d = d - Days::new(1);
        }
        self.used_dates.push(d);
        d
    }

    fn direct(&mut self, session: usize, statement: String) -> Block {
        let ack = self.ack();
        Block {
            session,
            turns: vec![(Role::User, statement), (Role::Assistant, ack)],
            evidence: vec![0],
        }
    }

    /// The assistant asks, the user answers tersely: the answer turn alone barely says what
    /// it is about, as in real chats.
    fn elicited(&mut self, session: usize, lead: String, ask: String, answer: String) -> Block {
        let ack = self.ack();
        Block {
            session,
            turns: vec![
                (Role::User, lead),
                (Role::Assistant, ask),
                (Role::User, answer),
                (Role::Assistant, ack),
            ],
            evidence: vec![2],
        }
    }

    /// The user asks, the assistant states the fact (e.g. from a tool).
    fn told(&mut self, session: usize, request: String, answer: String) -> Block {
        Block {
            session,
            turns: vec![(Role::User, request), (Role::Assistant, answer)],
            evidence: vec![1],
        }
    }

    fn q(&self, kind: QuestionKind, en: String, zh: String, blocks: &[usize], answer: Option<&str>) -> QSpec {
        QSpec {
            kind,
            lang: self.lang(),
            text: self.say(en, zh),
            blocks: blocks.to_vec(),
            answer: answer.map(String::from),
        }
    }

    /// The same question asked in the owner's other language.
    fn cross(&self, en: String, zh: String, blocks: &[usize], answer: Option<&str>) -> QSpec {
        let lang = self.lang().other();
        QSpec {
            kind: QuestionKind::CrossLanguage,
            lang,
            text: match lang {
                Lang::En => en,
                Lang::Zh => zh,
            },
            blocks: blocks.to_vec(),
            answer: answer.map(String::from),
        }
    }

    fn person(&mut self) -> String {
        self.rng.pick(&self.world.people).clone()
    }
}

/// All facts of one owner, one of each type.
pub fn all(rng: &mut Rng, world: &World) -> Vec<Fact> {
    let mut cx = Ctx {
        rng,
        world,
        used_dates: Vec::new(),
    };
    let cities = cx.rng.sample(&world.fact_cities, 4);
    vec![
        pet(&mut cx),
        moved(&mut cx, cities[0], cities[1]),
        allergy(&mut cx),
        script_language(&mut cx),
        editor(&mut cx),
        deadline(&mut cx),
        database(&mut cx),
        ownership(&mut cx),
        manager(&mut cx),
        migration(&mut cx),
        wedding(&mut cx, cities[2]),
        decisions(&mut cx),
        plan(&mut cx),
        coffee(&mut cx),
        staging(&mut cx),
        marathon(&mut cx, cities[3]),
    ]
}

use QuestionKind::{Lexical, MultiPerson, Paraphrase, Temporal};

fn pet(cx: &mut Ctx) -> Fact {
    let species = cx.rng.sample(&SPECIES, 2);
    let (young, adult, young_zh, adult_zh) = species[0];
    let (_, other, _, other_zh) = species[1];
    let names = match cx.lang() {
        Lang::En => cx.rng.sample(&PET_NAMES_EN, 2),
        Lang::Zh => cx.rng.sample(&PET_NAMES_ZH, 2),
    };
    let (name, other_name) = (names[0], names[1]);
    let s = cx.early();
    let block = if cx.rng.chance(0.4) {
        cx.elicited(
            s,
            cx.say(
                format!("We went to the shelter on Saturday and came home with a {young}!"),
                format!("周六去了趟救助站，带回来一只{young_zh}！"),
            ),
            cx.say(
                format!("That's wonderful! What did you name the {young}?"),
                format!("太好了！给{young_zh}起了什么名字？"),
            ),
            cx.say(
                format!("{name}. It already chewed through a charging cable."),
                format!("叫{name}，已经咬坏了一根充电线。"),
            ),
        )
    } else {
        let statement = cx.say(
            format!("Big weekend: we adopted a {young} from the shelter and named it {name}."),
            format!("这个周末我们从救助站领养了一只{young_zh}，给它取名叫{name}。"),
        );
        cx.direct(s, statement)
    };
    let a = Some(name);
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                format!("What did I name the {young} we adopted from the shelter?"),
                format!("我从救助站领养的{young_zh}取名叫什么？"),
                &[0],
                a,
            ),
            cx.q(
                Paraphrase,
                format!("What's my {adult} called again?"),
                format!("我家那只{adult_zh}叫啥来着？"),
                &[0],
                a,
            ),
            cx.cross(
                format!("What is my {adult}'s name?"),
                format!("我的{adult_zh}叫什么名字？"),
                &[0],
                a,
            ),
        ],
        distractors: vec![
            cx.say(
                format!("My sister's {other} {other_name} got into the bin again."),
                format!("我姐姐家的{other_zh}{other_name}又把垃圾桶翻了。"),
            ),
            cx.say(
                format!("The {adult} park by the office was packed at lunch."),
                format!("公司旁边的{adult_zh}公园中午人好多。"),
            ),
            cx.say(
                "Do you know a decent vet near the office?".into(),
                "你知道公司附近有靠谱的宠物医院吗？".into(),
            ),
            cx.say(
                format!("Our neighbour's {adult} barked all night, I barely slept."),
                format!("邻居家的{adult_zh}叫了一整晚，我几乎没睡。"),
            ),
            cx.say(
                format!("Saw a lost {adult} poster on the way to work, hope they find it."),
                format!("上班路上看到一张寻{adult_zh}启事，希望能找到。"),
            ),
        ],
    }
}

fn moved(cx: &mut Ctx, city: (&'static str, &'static str), home: (&'static str, &'static str)) -> Fact {
    let (city_en, city_zh) = city;
    let home = cx.world.city(home);
    let elsewhere = cx.world.city(*cx.rng.pick(&cx.world.filler_cities));
    let (p, q) = (cx.person(), cx.person());
    let s = cx.early();
    let block = if cx.rng.chance(0.4) {
        cx.elicited(
            s,
            cx.say(
                "The movers finally came yesterday, the new flat is full of boxes.".into(),
                "搬家公司昨天终于来了，新家堆满了箱子。".into(),
            ),
            cx.say(
                "Exciting! Which city did you end up in?".into(),
                "恭喜！最后定在哪个城市了？".into(),
            ),
            cx.say(
                format!("{city_en}. Still can't find the kettle."),
                format!("{city_zh}。到现在还没找到烧水壶。"),
            ),
        )
    } else {
        let statement = cx.say(
            format!("We finally moved to {city_en} — the new flat is ten minutes from the river."),
            format!("我们终于搬到{city_zh}了，新房子离江边只有十分钟。"),
        );
        cx.direct(s, statement)
    };
    let a = Some(cx.world.city(city));
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                "Which city did we move to?".into(),
                "我们搬到了哪个城市？".into(),
                &[0],
                a,
            ),
            cx.q(
                Paraphrase,
                "Where do I live these days?".into(),
                "我现在住在哪儿？".into(),
                &[0],
                a,
            ),
            cx.cross(
                "Which city do I live in now?".into(),
                "我现在住在哪个城市？".into(),
                &[0],
                a,
            ),
        ],
        distractors: vec![
            cx.say(
                format!("{p} just got back from {elsewhere}, apparently the food was amazing."),
                format!("{p}刚从{elsewhere}回来，说那边的美食太棒了。"),
            ),
            cx.say(
                format!("I grew up in {home}; the winters there were brutal."),
                format!("我在{home}长大，那边冬天特别难熬。"),
            ),
            cx.say(
                format!("{q} is thinking about moving to {elsewhere} next year."),
                format!("{q}在考虑明年搬去{elsewhere}。"),
            ),
            cx.say(
                "Rent prices in every city I look at are insane.".into(),
                "我看的每个城市房租都贵得离谱。".into(),
            ),
        ],
    }
}

fn allergy(cx: &mut Ctx) -> Fact {
    let foods = cx.rng.sample(&ALLERGENS, 2);
    let (food_en, food_zh) = foods[0];
    let (other_en, other_zh) = foods[1];
    let p = cx.person();
    let s = cx.early();
    let block = if cx.rng.chance(0.4) {
        cx.elicited(
            s,
            cx.say(
                "Can you help me order food for the offsite?".into(),
                "能帮我给团建订个餐吗？".into(),
            ),
            cx.say(
                "Sure — any dietary restrictions I should know about?".into(),
                "没问题——有什么饮食禁忌需要注意吗？".into(),
            ),
            cx.say(
                format!("Yes, {food_en}. Even a trace and I break out in hives."),
                format!("有，{food_zh}。沾一点就起疹子。"),
            ),
        )
    } else {
        let statement = cx.say(
            format!("Note for the team lunch: I'm allergic to {food_en}."),
            format!("团建点餐备注一下：我对{food_zh}过敏。"),
        );
        cx.direct(s, statement)
    };
    let a = Some(match cx.lang() {
        Lang::En => food_en,
        Lang::Zh => food_zh,
    });
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                "What am I allergic to?".into(),
                "我对什么过敏？".into(),
                &[0],
                a,
            ),
            cx.q(
                Paraphrase,
                "Which ingredient do I have to stay away from when eating out?".into(),
                "出去吃饭时我有什么忌口？".into(),
                &[0],
                a,
            ),
            cx.cross(
                "Which food am I allergic to?".into(),
                "我对哪种食物过敏？".into(),
                &[0],
                a,
            ),
        ],
        distractors: vec![
            cx.say(
                format!("{p} is allergic to cats, so no office pets."),
                format!("{p}对猫毛过敏，所以办公室不能养宠物。"),
            ),
            cx.say(
                "The team lunch is at the Thai place on Friday.".into(),
                "周五团建去吃泰国菜。".into(),
            ),
            cx.say(
                "Pollen season is brutal this year, my eyes won't stop watering.".into(),
                "今年花粉季太难受了，眼睛一直流泪。".into(),
            ),
            cx.say(
                format!("The new canteen menu has a lot of dishes with {other_en}."),
                format!("食堂的新菜单里好多菜都放了{other_zh}。"),
            ),
        ],
    }
}

fn script_language(cx: &mut Ctx) -> Fact {
    let langs = cx.rng.sample(&SCRIPT_LANGUAGES, 3);
    let (pick, other, third) = (langs[0], langs[1], langs[2]);
    let p = cx.person();
    let s = cx.early();
    let statement = cx.say(
        format!("For quick scripts I always reach for {pick}; {other} just feels clunky to me."),
        format!("写小脚本我一般都用{pick}，{other}用着太别扭。"),
    );
    let block = cx.direct(s, statement);
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                "Which language do I reach for when writing quick scripts?".into(),
                "写小脚本我一般用什么语言？".into(),
                &[0],
                None,
            ),
            cx.q(
                Paraphrase,
                "What's my favourite programming language for small automation jobs?".into(),
                "做自动化小工具我最喜欢哪种编程语言？".into(),
                &[0],
                None,
            ),
        ],
        distractors: vec![
            cx.say(
                format!("The {other} build failed again on CI."),
                format!("CI 上的 {other} 构建又挂了。"),
            ),
            cx.say(
                format!("{p} is rewriting the importer in {third}."),
                format!("{p}在用 {third} 重写导入程序。"),
            ),
            cx.say(
                "Which programming language should a beginner learn first?".into(),
                "初学者应该先学哪门编程语言？".into(),
            ),
        ],
    }
}

fn editor(cx: &mut Ctx) -> Fact {
    let editors = cx.rng.sample(&EDITORS, 2);
    let (pick, other) = (editors[0], editors[1]);
    let p = cx.person();
    let s = cx.early();
    let statement = cx.say(
        format!("I switched my main editor to {pick} last week, the keybindings finally click."),
        format!("上周我把主力编辑器换成了{pick}，快捷键终于顺手了。"),
    );
    let block = cx.direct(s, statement);
    let a = Some(pick);
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                "Which editor did I switch to?".into(),
                "我把编辑器换成了哪个？".into(),
                &[0],
                a,
            ),
            cx.q(
                Paraphrase,
                "What IDE am I using these days?".into(),
                "我现在用什么软件写代码？".into(),
                &[0],
                a,
            ),
        ],
        distractors: vec![
            cx.say(
                format!("{p} swears by {other}, we argued about it over lunch."),
                format!("{p}特别推崇{other}，午饭时我们还为这个争了半天。"),
            ),
            cx.say(
                "My editor crashed and I lost ten minutes of work.".into(),
                "编辑器崩了，白干了十分钟。".into(),
            ),
            cx.say(
                "Can you recommend a good monospace font for coding?".into(),
                "能推荐一个适合写代码的等宽字体吗？".into(),
            ),
        ],
    }
}

fn deadline(cx: &mut Ctx) -> Fact {
    let project = cx.world.projects[0].clone();
    let other = cx.world.projects[1].clone();
    let p = cx.person();
    let s = cx.early();
    let latest = NaiveDate::from_ymd_opt(2026, 5, 28).expect("valid");
    let offset = cx.rng.range(45, 110) as i64;
    let due = cx.unique_date(cx.date(s), offset, latest);
    let (due_iso, due_zh) = (iso(due), zh_date(due));
    let statement = cx.say(
        format!("Deadline's confirmed: {project} has to ship by {due_iso}."),
        format!("截止日期定了：{project} 必须在 {due_zh} 之前上线。"),
    );
    let block = cx.direct(s, statement);
    let a = cx.say(due_iso.clone(), due_zh.clone());
    let a = Some(a.as_str());
    let (md, md_zh) = (en_month_day(due), zh_month_day(due));
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                format!("When does {project} have to ship?"),
                format!("{project} 必须在什么时候上线？"),
                &[0],
                a,
            ),
            cx.q(
                Paraphrase,
                format!("What's the due date for {project}?"),
                format!("{project} 的最后期限是哪天？"),
                &[0],
                a,
            ),
            cx.q(
                Temporal,
                format!("Which project is due on {md}?"),
                format!("{md_zh}要交付的是哪个项目？"),
                &[0],
                a,
            ),
            cx.cross(
                format!("When is the {project} deadline?"),
                format!("{project} 项目的截止日期是哪天？"),
                &[0],
                a,
            ),
        ],
        distractors: vec![
            cx.say(
                format!("{project} standup moved to 10:30 from now on."),
                format!("{project} 的站会以后改到十点半。"),
            ),
            cx.say(
                format!("{p} says the {project} CI pipeline is flaky again."),
                format!("{p}说 {project} 的 CI 流水线又不稳定了。"),
            ),
            cx.say(
                format!("Can we push the {other} demo to next week?"),
                format!("{other} 的演示能推到下周吗？"),
            ),
            cx.say(
                format!("The {project} design review went fine, a few comments on naming."),
                format!("{project} 的设计评审挺顺利，只有几条关于命名的意见。"),
            ),
        ],
    }
}

fn database(cx: &mut Ctx) -> Fact {
    let project = cx.world.projects[2].clone();
    let dbs = cx.rng.sample(&DATABASES, 3);
    let (db, other, third) = (dbs[0], dbs[1], dbs[2]);
    let (reason, reason_zh) = *cx.rng.pick(&REASONS);
    let p = cx.person();
    let s = cx.early();
    let statement = cx.say(
        format!("Decision for {project}: we're going with {db} because we need {reason}."),
        format!("{project} 的数据库定了：用 {db}，因为我们需要{reason_zh}。"),
    );
    let block = cx.direct(s, statement);
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                format!("Which database are we going with for {project}?"),
                format!("{project} 用的是哪个数据库？"),
                &[0],
                None,
            ),
            cx.q(
                Paraphrase,
                format!("Where will {project} keep its data?"),
                format!("{project} 的数据存放在什么存储里？"),
                &[0],
                None,
            ),
        ],
        distractors: vec![
            cx.say(
                format!("The {other} connection pool is maxed out on staging again."),
                format!("预发环境的 {other} 连接池又满了。"),
            ),
            cx.say(
                format!("{p} wants to benchmark {other} against {third} before anyone decides anything."),
                format!("{p}想先拿 {other} 和 {third} 做个压测再说。"),
            ),
            cx.say(
                format!("The {db} docs on replication are confusing."),
                format!("{db} 关于主从复制的文档写得很乱。"),
            ),
        ],
    }
}

fn ownership(cx: &mut Ctx) -> Fact {
    let people = cx.rng.sample(&cx.world.people, 5);
    let services = cx.world.services.clone();
    let (svc1, svc2) = (services[0], services[1]);
    let (name1, name2) = (cx.world.service(svc1), cx.world.service(svc2));
    let mut blocks = Vec::new();
    let mut distractors = Vec::new();
    for (i, svc) in [svc1, svc2].into_iter().enumerate() {
        let (owner, previous) = (&people[2 * i], &people[2 * i + 1]);
        let (en, zh) = (svc.0, svc.1);
        let s = cx.early();
        let statement = cx.say(
            format!("Org update: {owner} owns the {en} service from now on; {previous} handed it over last week."),
            format!("组织调整：{zh}服务以后由{owner}负责，{previous}上周已经交接完了。"),
        );
        blocks.push(cx.direct(s, statement));
        let n = cx.rng.range(200, 900);
        let third = &people[4];
        distractors.extend([
            cx.say(
                format!("{owner} is out on Friday for a dentist appointment."),
                format!("{owner}周五请假去看牙医。"),
            ),
            cx.say(
                format!("{previous} pushed a hotfix to the {en} service yesterday."),
                format!("{previous}昨天给{zh}服务推了一个热修复。"),
            ),
            cx.say(
                format!("The {en} dashboard shows a spike of 5xx errors, p99 at {n} ms."),
                format!("{zh}服务的监控面板上 5xx 错误突增，p99 到了 {n} 毫秒。"),
            ),
            cx.say(
                format!("{third} asked for access to the {en} repo."),
                format!("{third}申请了{zh}代码仓库的权限。"),
            ),
        ]);
    }
    Fact {
        questions: vec![
            cx.q(
                MultiPerson,
                format!("Who owns the {} service?", svc1.0),
                format!("{}服务现在归谁负责？", svc1.1),
                &[0],
                None,
            ),
            cx.q(
                MultiPerson,
                format!("Who should I ping when {name1} breaks?"),
                format!("{name1}出问题了该找谁？"),
                &[0],
                None,
            ),
            cx.q(
                MultiPerson,
                format!("Who is responsible for {name2} now?"),
                format!("{name2}现在由谁来管？"),
                &[1],
                None,
            ),
            cx.q(
                MultiPerson,
                format!("Who took over {name2} after the handover?"),
                format!("交接之后{name2}归谁了？"),
                &[1],
                None,
            ),
            cx.q(
                MultiPerson,
                format!("Who owns {name1} and who owns {name2}?"),
                format!("{name1}和{name2}分别由谁负责？"),
                &[0, 1],
                None,
            ),
            cx.cross(
                format!("Who owns the {} service now?", svc1.0),
                format!("{}服务现在是谁负责？", svc1.1),
                &[0],
                None,
            ),
        ],
        blocks,
        distractors,
    }
}

fn manager(cx: &mut Ctx) -> Fact {
    let people = cx.rng.sample(&cx.world.people, 3);
    let (boss, other, author) = (&people[0], &people[1], &people[2]);
    let s = cx.early();
    let statement = cx.say(
        format!("Re-org news: I now report to {boss}, starting Monday."),
        format!("组织架构调整：从下周一开始我向{boss}汇报。"),
    );
    let block = cx.direct(s, statement);
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                MultiPerson,
                "Who do I report to now?".into(),
                "我现在向谁汇报？".into(),
                &[0],
                None,
            ),
            cx.q(
                MultiPerson,
                "Who is my manager?".into(),
                "我的直属领导是谁？".into(),
                &[0],
                None,
            ),
        ],
        distractors: vec![
            cx.say(
                format!("{other} is the new manager of the data team."),
                format!("{other}是数据团队的新经理。"),
            ),
            cx.say(
                format!("{author} sent a long email about the quarterly goals."),
                format!("{author}发了一封很长的邮件讲季度目标。"),
            ),
            cx.say(
                "My one-on-one got moved again.".into(),
                "我的一对一沟通又被改期了。".into(),
            ),
        ],
    }
}

fn migration(cx: &mut Ctx) -> Fact {
    let systems = cx.rng.sample(&SYSTEMS, 2);
    let (system, system_zh) = systems[0];
    let (other, other_zh) = systems[1];
    let p = cx.person();
    let s = cx.early().max(1);
    let back = cx.rng.range(1, 4) as i64;
    let day = cx.unique_date(cx.date(s), -back, cx.date(s));
    let (day_iso, day_zh) = (iso(day), zh_date(day));
    let statement = cx.say(
        format!("Done: the {system} migration happened on {day_iso}, zero downtime."),
        format!("搞定了：{system_zh}迁移在 {day_zh} 完成，零停机。"),
    );
    let block = cx.direct(s, statement);
    let a = cx.say(day_iso.clone(), day_zh.clone());
    let a = Some(a.as_str());
    let (md, md_zh) = (en_month_day(day), zh_month_day(day));
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                format!("When did the {system} migration happen?"),
                format!("{system_zh}迁移是哪天完成的？"),
                &[0],
                a,
            ),
            cx.q(
                Temporal,
                format!("What did we migrate on {md}?"),
                format!("{md_zh}我们迁移了什么？"),
                &[0],
                a,
            ),
        ],
        distractors: vec![
            cx.say(
                format!("We should plan the {other} migration for next quarter."),
                format!("{other_zh}的迁移得排到下个季度。"),
            ),
            cx.say(
                "The migration scripts live in the ops repo under /migrations.".into(),
                "迁移脚本都在 ops 仓库的 /migrations 目录下。".into(),
            ),
            cx.say(
                format!("The {system} is slow today, {p} is looking into it."),
                format!("今天{system_zh}有点慢，{p}在排查。"),
            ),
        ],
    }
}

fn wedding(cx: &mut Ctx, city: (&'static str, &'static str)) -> Fact {
    let (city_en, city_zh) = city;
    let sister = match cx.lang() {
        Lang::En => *cx.rng.pick(&SISTERS_EN),
        Lang::Zh => *cx.rng.pick(&SISTERS_ZH),
    };
    let p = cx.person();
    let s = cx.early();
    let latest = NaiveDate::from_ymd_opt(2026, 5, 30).expect("valid");
    let offset = cx.rng.range(30, 90) as i64;
    let day = cx.unique_date(cx.date(s), offset, latest);
    let (day_iso, day_zh) = (iso(day), zh_date(day));
    let statement = cx.say(
        format!("My sister {sister} is getting married on {day_iso} in {city_en}, I need to book flights."),
        format!("我妹妹{sister} {day_zh}在{city_zh}办婚礼，我得赶紧订机票。"),
    );
    let block = cx.direct(s, statement);
    let a = cx.say(day_iso.clone(), day_zh.clone());
    let a = Some(a.as_str());
    let (md, md_zh) = (en_month_day(day), zh_month_day(day));
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                "When is my sister getting married?".into(),
                "我妹妹哪天办婚礼？".into(),
                &[0],
                a,
            ),
            cx.q(
                Temporal,
                format!("What's happening on {md}?"),
                format!("{md_zh}有什么安排？"),
                &[0],
                a,
            ),
        ],
        distractors: vec![
            cx.say(
                format!("{p}'s wedding photos are hilarious, the cake fell over."),
                format!("{p}的婚礼照片太搞笑了，蛋糕都倒了。"),
            ),
            cx.say(
                "My cousin's birthday party is this weekend.".into(),
                "这周末是我表哥的生日聚会。".into(),
            ),
            cx.say(
                "I need a new suit, mine doesn't fit any more.".into(),
                "我得买套新西装，旧的穿不下了。".into(),
            ),
        ],
    }
}

fn decisions(cx: &mut Ctx) -> Fact {
    let (subject, subject_zh, first, first_zh, later, later_zh) = *cx.rng.pick(&SUBJECTS);
    let p = cx.person();
    let (s0, s1) = (cx.early().min(3), cx.late());
    let (d0, d1) = (cx.date(s0), cx.date(s1));
    // Same wording for both, so only the date tells them apart.
    let early = cx.say(
        format!("Decision on the {subject}: we {first}."),
        format!("关于{subject_zh}的决定：我们{first_zh}。"),
    );
    let late = cx.say(
        format!("Decision on the {subject}: we {later}."),
        format!("关于{subject_zh}的决定：我们{later_zh}。"),
    );
    let blocks = vec![cx.direct(s0, early), cx.direct(s1, late)];
    let (a0, a1) = (
        cx.say(first.into(), first_zh.into()),
        cx.say(later.into(), later_zh.into()),
    );
    let (m0, m1) = (month_en(d0), month_en(d1));
    let (m0_zh, m1_zh) = (month_zh(d0), month_zh(d1));
    Fact {
        questions: vec![
            cx.q(
                Temporal,
                format!("What did we decide about the {subject} in {m1}?"),
                format!("{m1_zh}份我们对{subject_zh}做了什么决定？"),
                &[1],
                Some(&a1),
            ),
            cx.q(
                Temporal,
                format!("What was our {subject} decision back in {m0}?"),
                format!("{m0_zh}份关于{subject_zh}定的是什么？"),
                &[0],
                Some(&a0),
            ),
        ],
        blocks,
        distractors: vec![
            cx.say(
                format!("Still torn on the {subject}, let's revisit it later."),
                format!("{subject_zh}还没想好，以后再说吧。"),
            ),
            cx.say(
                format!("{p} wrote a doc comparing options for the {subject}."),
                format!("{p}写了一篇文档对比{subject_zh}的几个方案。"),
            ),
            cx.say(
                format!("Can you list pros and cons for the {subject} options?"),
                format!("能帮我列一下{subject_zh}各个方案的优缺点吗？"),
            ),
        ],
    }
}

fn plan(cx: &mut Ctx) -> Fact {
    let (skill, skill_zh) = *cx.rng.pick(&SKILLS);
    let venues = cx.rng.sample(&VENUES, 2);
    let (venue, venue_zh) = venues[0];
    let (other_venue, other_venue_zh) = venues[1];
    let p = cx.person();
    let s = cx.early();
    let statement = cx.say(
        format!("My plan for Q2: learn {skill} properly and give a talk about it at {venue}."),
        format!("我第二季度的计划：好好学{skill_zh}，然后在{venue_zh}上做个分享。"),
    );
    let block = cx.direct(s, statement);
    let a = cx.say(skill.into(), skill_zh.into());
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                "What did I plan to learn in Q2?".into(),
                "我第二季度打算学什么？".into(),
                &[0],
                Some(&a),
            ),
            cx.q(
                Paraphrase,
                "Which new skill was I hoping to pick up this spring?".into(),
                "这个春天我想掌握什么新本领？".into(),
                &[0],
                Some(&a),
            ),
        ],
        distractors: vec![
            cx.say(
                format!("{p} gave a great talk at {other_venue} last year."),
                format!("{p}去年在{other_venue_zh}的分享讲得很好。"),
            ),
            cx.say(
                "I keep buying online courses and never finishing them.".into(),
                "我总是买网课，却从来没学完过。".into(),
            ),
            cx.say(
                "The Q2 planning meeting is on Thursday.".into(),
                "第二季度的规划会在周四。".into(),
            ),
        ],
    }
}

fn coffee(cx: &mut Ctx) -> Fact {
    let (drink, drink_zh) = *cx.rng.pick(&COFFEES);
    let p = cx.person();
    let s = cx.early();
    let block = if cx.rng.chance(0.4) {
        cx.elicited(
            s,
            cx.say(
                "I'm heading out to the café, want anything?".into(),
                "我要去咖啡店，你要带点什么吗？".into(),
            ),
            cx.say(
                "Ha, I'm fine. What do you usually get there?".into(),
                "哈哈，我不用。你一般在那儿点什么？".into(),
            ),
            cx.say(
                format!("The {drink}, no sugar. Every single time."),
                format!("{drink_zh}，不加糖，每次都是。"),
            ),
        )
    } else {
        let statement = cx.say(
            format!("Coffee run? My usual is {} {drink}, no sugar.", article(drink)),
            format!("要去买咖啡吗？我一般喝{drink_zh}，不加糖。"),
        );
        cx.direct(s, statement)
    };
    let a = cx.say(drink.into(), drink_zh.into());
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                "What is my usual coffee?".into(),
                "我一般喝什么咖啡？".into(),
                &[0],
                Some(&a),
            ),
            cx.q(
                Paraphrase,
                "What drink should you get me from the café?".into(),
                "去咖啡店的话该给我带什么饮品？".into(),
                &[0],
                Some(&a),
            ),
        ],
        distractors: vec![
            cx.say(
                "The coffee machine on the third floor is broken again.".into(),
                "三楼的咖啡机又坏了。".into(),
            ),
            cx.say(
                format!("{p} brought pastries from the new bakery."),
                format!("{p}从新开的面包店带了点心。"),
            ),
            cx.say(
                "I've had way too much coffee today, my hands are shaking.".into(),
                "今天咖啡喝太多了，手都在抖。".into(),
            ),
        ],
    }
}

fn staging(cx: &mut Ctx) -> Fact {
    let db = *cx.rng.pick(&DATABASES[..2]);
    let port = *cx.rng.pick(&PORTS);
    let s = cx.early();
    let block = cx.told(
        s,
        cx.say(
            "Can you check how we connect to the staging database?".into(),
            "帮我查一下测试环境的数据库怎么连？".into(),
        ),
        cx.say(
            format!("From the config: staging {db} listens on port {port} behind pgbouncer, host db-staging.internal."),
            format!("配置里写的是：staging 的 {db} 监听 {port} 端口，前面有 pgbouncer，主机是 db-staging.internal。"),
        ),
    );
    let a = Some(port);
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                "Which port does the staging database listen on?".into(),
                "测试环境数据库监听哪个端口？".into(),
                &[0],
                a,
            ),
            cx.q(
                Paraphrase,
                "How do I reach the pre-production db?".into(),
                "预发布环境的库怎么连上去？".into(),
                &[0],
                a,
            ),
        ],
        distractors: vec![
            cx.say(
                "psql says connection to db-prod.internal timed out, is prod down?".into(),
                "psql 连 db-prod.internal 超时了，生产环境挂了吗？".into(),
            ),
            cx.say(
                "Redis on the default port looks fine, I checked it.".into(),
                "Redis 默认端口没问题，我查过了。".into(),
            ),
            cx.say(
                "Who has the credentials for the staging environment?".into(),
                "谁有测试环境的账号密码？".into(),
            ),
        ],
    }
}

fn marathon(cx: &mut Ctx, city: (&'static str, &'static str)) -> Fact {
    let (city_en, city_zh) = city;
    let p = cx.person();
    let s = cx.early();
    let statement = cx.say(
        format!("I signed up for the {city_en} half marathon, training starts now."),
        format!("我报名了{city_zh}半程马拉松，从现在开始训练。"),
    );
    let block = cx.direct(s, statement);
    let a = Some(cx.world.city(city));
    Fact {
        blocks: vec![block],
        questions: vec![
            cx.q(
                Lexical,
                "Which half marathon did I sign up for?".into(),
                "我报名了哪个半程马拉松？".into(),
                &[0],
                a,
            ),
            cx.q(
                Paraphrase,
                "What running race am I preparing for?".into(),
                "我在为哪场跑步比赛做准备？".into(),
                &[0],
                a,
            ),
        ],
        distractors: vec![
            cx.say(
                "My knee hurts after yesterday's run.".into(),
                "昨天跑完步膝盖有点疼。".into(),
            ),
            cx.say(
                format!("{p} ran a 10k in under 45 minutes!"),
                format!("{p}十公里跑进了45分钟！"),
            ),
            cx.say(
                "Bought new running shoes, they feel great.".into(),
                "买了双新跑鞋，穿着很舒服。".into(),
            ),
        ],
    }
}
