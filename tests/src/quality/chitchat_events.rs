//! The evidence of the `chitchat` dev set: events two friends tell each other once, in first
//! person and often with a relative time ("yesterday", "last Saturday"), the third-person
//! questions asked about them later, and same-topic distractors.
//!
//! Every event is a list of beats: two consecutive turns, a line by one speaker and the other
//! speaker's reaction (or a parallel line of their own). Beats keep the conversation's
//! alternation of speakers when they are dropped between two filler turns.
//!
//! Every answer is a *key*: a string that occurs in the evidence turns of its question and in no
//! other turn of the conversation (the reactions and distractors never name a key, and the
//! filler is chosen without them; `chitchat`'s tests check it). Questions avoid the keys' and
//! the statements' words, so that word overlap between a question and its evidence stays low.

use chrono::{Datelike, Days, NaiveDate, Weekday};

use super::chitchat::ChatKind;
use super::facts::MONTHS_EN;
use crate::rng::Rng;

/// One injected turn.
#[derive(Debug, Clone)]
pub struct Line {
    /// 0 or 1: which of the conversation's two people says it.
    pub speaker: usize,
    pub content: String,
    /// What a shared photo shows, kept in the turn's metadata, not in its content.
    pub caption: Option<String>,
}

/// Two consecutive turns placed in one session: `lines[0]` by one speaker, `lines[1]` by the
/// other.
#[derive(Debug, Clone)]
pub struct Beat {
    pub session: usize,
    pub lines: [Line; 2],
}

#[derive(Debug, Clone)]
pub struct QPlan {
    pub kind: ChatKind,
    pub text: String,
    /// (beat, line) of the event's evidence turns.
    pub evidence: Vec<(usize, usize)>,
    /// Keys: each occurs in the evidence and nowhere else in the conversation.
    pub answers: Vec<String>,
    /// The day the question's event happened, for temporal questions.
    pub date: Option<NaiveDate>,
}

#[derive(Debug, Clone, Default)]
pub struct Event {
    pub beats: Vec<Beat>,
    pub questions: Vec<QPlan>,
}

/// How the listener reacts.
#[derive(Debug, Clone, Copy)]
enum Mood {
    Good,
    Bad,
    Curious,
    Photo,
}

const REPLIES_GOOD: [&str; 12] = [
    "omg congrats!!",
    "that's amazing",
    "no way!! good for you",
    "love that for you",
    "ahh nice",
    "wait that's so cool",
    "yesss",
    "haha that's awesome",
    "so jealous right now",
    "you have to tell me everything",
    "that's so exciting",
    "ok that made my day",
];
const REPLIES_BAD: [&str; 7] = [
    "oh no, are you ok?",
    "ugh that's the worst",
    "noooo I'm so sorry",
    "yikes. take it easy please",
    "that sucks, feel better",
    "oof. that sounds painful",
    "dang, that's rough",
];
const REPLIES_CURIOUS: [&str; 8] = [
    "oh cool, how was it?",
    "haha nice",
    "huh, I didn't know that",
    "ha really?",
    "oh fun",
    "wait since when?",
    "interesting haha",
    "I feel like you mentioned that once",
];
const REPLIES_PHOTO: [&str; 8] = [
    "wow that looks great",
    "okay that's gorgeous",
    "stop it, that's so cute",
    "ok I'm officially jealous",
    "that's beautiful!!",
    "whoa, nice shot",
    "I need to see that in person",
    "saving this pic",
];
/// What the event's speaker says back after a distractor line.
const REPLIES_DISTRACTOR: [&str; 8] = [
    "haha fair",
    "lol same honestly",
    "I get that",
    "right??",
    "hmm maybe",
    "ha, classic",
    "yeah I hear you",
    "that's so real",
];

/// A one-line event: a speaker says it once; the question asks for the key.
struct Single {
    topic: &'static str,
    /// (key, detail): the key is the answer; the detail is free text.
    values: &'static [(&'static str, &'static str)],
    /// Statements with a relative time: `{when}` (or `{When}` at the start), `{key}`, `{detail}`.
    timed: &'static [&'static str],
    /// Statements without a time.
    untimed: &'static [&'static str],
    /// Single-fact questions: `{n}` is the speaker's name, `{detail}` the detail (never the
    /// key: it is the answer). They must read well with " on {date}" before the "?".
    ask: &'static [&'static str],
    /// "When" questions, answered by the statement's date; they may name the `{key}`.
    ask_when: &'static [&'static str],
    mood: Mood,
    /// Same-topic lines without a key, said in other sessions.
    distract: &'static [&'static str],
}

const RACE: Single = Single {
    topic: "race",
    values: &[
        ("half marathon", "2 hours 4 minutes"),
        ("trail ultra", "almost seven hours"),
        ("sprint triathlon", "1:38"),
        ("charity 5k", "27 minutes"),
        ("mud obstacle course", "an hour and a half"),
        ("century bike ride", "six and a half hours"),
        ("relay marathon", "our leg in 55 minutes"),
        ("open water swim", "48 minutes"),
    ],
    timed: &[
        "did my first {key} {when}!! {detail}, my legs are jelly",
        "{When} I did my first {key}, the one I've been training for. {detail}, not bad for an old lady lol",
        "so I did my first {key} {when}. never again. ({detail})",
    ],
    untimed: &["crossed the finish line of my first {key} in {detail}, still can't believe it"],
    ask: &[
        "What kind of race did {n} do for the first time?",
        "Which endurance event did {n} complete?",
        "What was {n}'s first big athletic challenge?",
    ],
    ask_when: &[
        "When did {n} do the {key}?",
        "When did {n} compete in a race?",
        "When did {n} take on the endurance event?",
    ],
    mood: Mood::Good,
    distract: &[
        "my roommate keeps asking me to go jogging with her at 6am. absolutely not",
        "I watched people running past our street this morning, they looked miserable",
        "I should really start exercising again, my knees are getting creaky",
        "training update: ran 8 miles this morning, slowest ever",
        "my legs are still sore from training, stairs are my enemy",
        "I bought new running shoes, they're neon orange",
    ],
};

const PET: Single = Single {
    topic: "pet",
    values: &[
        ("Pretzel", "beagle"),
        ("Mochi", "grey tabby"),
        ("Nacho", "chihuahua mix"),
        ("Biscotti", "greyhound"),
        ("Marzipan", "lop-eared rabbit"),
        ("Gizmo", "corgi"),
        ("Tofu", "white kitten"),
        ("Waffles", "basset hound"),
    ],
    timed: &[
        "we adopted a {detail} from the rescue {when}! the kids named him {key}",
        "guess who has a new roommate. a {detail} called {key}. picked her up {when}",
        "{When} we brought home a little {detail}, {key} is already running the house",
    ],
    untimed: &["meet {key}, our new {detail}. she sleeps on my face every night"],
    ask: &[
        "What did {n} name the new {detail}?",
        "What is the name of the {detail} {n}'s family adopted?",
        "What is {n}'s newest furry companion called?",
    ],
    ask_when: &[
        "When did {n} get the {detail}?",
        "When did {n} adopt an animal?",
        "When did {n}'s family get the pet?",
    ],
    mood: Mood::Good,
    distract: &[
        "my neighbour's dog barked literally all night",
        "I want a cat so bad but my landlord says no animals",
        "saw the cutest puppy at the park today, almost stole it",
        "we're thinking about getting a pet, the kids won't stop asking",
        "vet bills are no joke, just saying",
        "I spent an hour at the pet store looking at leashes",
    ],
};

const INSTRUMENT: Single = Single {
    topic: "instrument",
    values: &[
        ("ukulele", "my fingertips are so sore"),
        ("cello", "my neighbours probably hate me"),
        ("banjo", "my teacher is this 80 year old guy"),
        ("saxophone", "I sound like a dying goose"),
        ("mandolin", "it's harder than it looks"),
        ("harmonica", "the dog howls every time"),
        ("accordion", "it weighs a ton"),
        ("trombone", "my lips are numb"),
    ],
    timed: &[
        "started {key} lessons {when}, {detail}",
        "{When} I bought a secondhand {key} and I've been practicing every night. {detail}",
    ],
    untimed: &["I've been practicing {key} with youtube videos, {detail}"],
    ask: &[
        "Which musical instrument is {n} learning?",
        "What is {n} taking lessons in?",
        "What has {n} been practicing at home?",
    ],
    ask_when: &[
        "When did {n} start playing the {key}?",
        "When did {n} begin taking music lessons?",
    ],
    mood: Mood::Curious,
    distract: &[
        "I used to play piano as a kid but I quit after like two years",
        "there's a guy who plays guitar outside my work every day",
        "I wish I was musical at all honestly",
        "practice went badly today, I kept losing the rhythm",
        "my music teacher says I rush every song",
        "I watched a concert video for inspiration, now I feel terrible at this",
    ],
};

const TRIP: Single = Single {
    topic: "trip",
    values: &[
        ("Banff", "the lakes"),
        ("Oaxaca", "the mole sauces"),
        ("Yellowstone", "the geysers"),
        ("Reykjavik", "the hot springs"),
        ("Savannah", "the old squares"),
        ("Outer Banks", "the beaches"),
        ("Santa Fe", "the sunsets"),
        ("Montreal", "the bagels"),
    ],
    timed: &[
        "just got back from {key} {when}, {detail} were unreal",
        "{When} we drove up to {key}. worth every hour in the car, {detail} alone",
    ],
    untimed: &["still dreaming about {key}. {detail}, man"],
    ask: &[
        "Where did {n} go to see {detail}?",
        "Where did {n} see {detail}?",
        "Where did {n} get back from?",
    ],
    ask_when: &["When did {n} go to {key}?", "When was {n} away on holiday?"],
    mood: Mood::Curious,
    distract: &[
        "I need a vacation so badly, I haven't left the city in a year",
        "my parents keep sending me pictures from their cruise",
        "airfare is insane right now, I looked last night",
        "we're planning a trip for the spring but can't agree where",
        "I finally unpacked my suitcase, only took a week",
        "looking at old vacation pictures and feeling sad",
    ],
};

const JOB: Single = Single {
    topic: "job",
    values: &[
        ("Halvorsen Logistics", "start in two weeks"),
        ("Brightwater Dental", "the pay is way better"),
        ("Pinecrest Library", "it's a five minute walk"),
        ("Corvid Games", "they have a slide in the office"),
        ("Redline Auto", "full benefits finally"),
        ("Maple and Finch", "the team seems so nice"),
        ("Tidewater Hospital", "night shifts though"),
        ("Lumen Analytics", "it's fully remote"),
    ],
    timed: &[
        "I GOT THE JOB at {key}!!! found out {when}, {detail}",
        "signed the offer from {key} {when}, new job here I come. goodbye retail forever. {detail}",
    ],
    untimed: &["so it's official, new job at {key}. {detail}"],
    ask: &[
        "Which company gave {n} the job?",
        "Who made {n} an employment offer?",
        "Where is {n}'s new job?",
    ],
    ask_when: &[
        "When did {n} get the job at {key}?",
        "When did {n} accept the new position?",
    ],
    mood: Mood::Good,
    distract: &[
        "my boss scheduled a meeting at 4:55 on a friday. who does that",
        "I've been applying to places for months and nobody calls back",
        "work was so slow today I reorganized my desk twice",
        "had another interview today, I think it went ok?",
        "updated my resume for the tenth time",
        "I hate writing cover letters so much",
    ],
};

const COOKING: Single = Single {
    topic: "cooking",
    values: &[
        ("beef wellington", "took me like five hours"),
        ("pork tamales", "my abuela would be proud"),
        ("baklava", "so much butter"),
        ("seafood paella", "the crispy bottom part was perfect"),
        ("potato pierogi", "I made like sixty of them"),
        ("tonkotsu ramen", "the broth simmered all day"),
        ("chicken tikka masala", "the whole building smelled amazing"),
        ("croissants", "three days of folding dough"),
    ],
    timed: &[
        "made {key} from scratch {when}, {detail}",
        "{When} I attempted {key} from scratch. smoke alarm went off twice but {detail}",
    ],
    untimed: &["ok I'm officially a chef, made {key} from scratch and {detail}"],
    ask: &[
        "What did {n} cook from scratch?",
        "Which dish did {n} spend hours preparing?",
        "What dish did {n} attempt from scratch?",
    ],
    ask_when: &[
        "When did {n} make the {key}?",
        "When did {n} attempt the ambitious recipe?",
    ],
    mood: Mood::Good,
    distract: &[
        "I had cereal for dinner again, don't judge me",
        "we ordered takeout three times this week, it's getting bad",
        "I burned toast this morning. toast.",
        "I'm trying to cook more at home to save money",
        "bought a fancy knife and now I chop everything",
        "my kitchen is way too small for real cooking",
    ],
};

const BOOK: Single = Single {
    topic: "book",
    values: &[
        ("The Salt Orchard", "that ending wrecked me"),
        ("A Map of Quiet Rivers", "I cried on the bus"),
        ("Glasshouse Summer", "everyone was right about it"),
        ("The Ninth Lantern", "the twist was so good"),
        ("Borrowed Thunder", "I need the sequel now"),
        ("Paper Comets", "best thing I've read in years"),
        ("The Cartographer's Daughter", "it's so long but worth it"),
        ("Winter at Hollow Creek", "so cozy"),
    ],
    timed: &[
        "stayed up till 3am {when} reading {key}, {detail}",
        "finally read {key} {when}. {detail}",
    ],
    untimed: &["you HAVE to read {key}, {detail}"],
    ask: &[
        "Which novel did {n} read?",
        "What book kept {n} awake?",
        "What book did {n} stay up reading?",
    ],
    ask_when: &["When did {n} read {key}?", "When did {n} finish the novel?"],
    mood: Mood::Curious,
    distract: &[
        "I bought like four books last month and haven't opened one",
        "my book club picked something so boring this time",
        "I can't focus on reading anymore, I just scroll",
        "the library has a three month wait on everything good",
        "I'm in a reading slump, nothing grabs me",
        "started a new book last night, not sure yet",
    ],
};

const CONCERT: Single = Single {
    topic: "concert",
    values: &[
        ("Velvet Hornets", "my ears are still ringing"),
        ("Moonlit Static", "front row!!"),
        ("Copper Owls", "they played for three hours"),
        ("Saint Lemonade", "the crowd was wild"),
        ("Neon Harbor", "I lost my voice singing"),
        ("Dusty Satellites", "best night of my life"),
        ("Paper Lanterns Collective", "the drummer threw me a stick"),
        ("Lakeside Riot", "so worth the ticket price"),
    ],
    timed: &[
        "saw {key} live {when}, what a show. {detail}",
        "{When} we went to the {key} show. {detail}",
    ],
    untimed: &["still buzzing from the {key} show, {detail}"],
    ask: &[
        "Which band's show did {n} go to?",
        "What group's gig did {n} attend?",
        "Which band did {n} see at a show?",
    ],
    ask_when: &["When did {n} see {key}?", "When did {n} attend the live performance?"],
    mood: Mood::Good,
    distract: &[
        "concert tickets are so expensive now it's a joke",
        "the music at my gym is so bad, same five songs",
        "I've had the same song stuck in my head for three days",
        "I have tickets for another show in the fall",
        "my ears are still ringing from the bar last night lol",
        "the band I like just announced a tour but not near us",
    ],
};

const INJURY: Single = Single {
    topic: "injury",
    values: &[
        ("bouldering", "sprained my ankle"),
        ("skateboarding", "broke my wrist"),
        ("snowboarding", "cracked a rib"),
        ("pickleball", "twisted my knee"),
        ("moving a couch", "pulled a muscle in my back"),
        ("trampoline park", "jammed my shoulder"),
        ("roller derby", "bruised my tailbone"),
        ("slacklining", "hurt my elbow"),
    ],
    timed: &[
        "{detail} {key} {when}, so I'm on the couch for a while",
        "welp. {When} I {detail}, {key} is not for me apparently",
    ],
    untimed: &["I {detail} {key}, don't laugh"],
    ask: &[
        "How did {n} get hurt?",
        "What activity caused {n}'s injury?",
        "Why is {n} stuck on the couch?",
    ],
    ask_when: &["When did {n} get hurt {key}?", "When did {n}'s accident happen?"],
    mood: Mood::Bad,
    distract: &[
        "I stubbed my toe so hard on the bed frame this morning",
        "my back hurts from sitting at this desk all day",
        "my doctor says I need to stretch more. I will not",
        "physical therapy is so boring but I'm going",
        "the doctor says no sports for six weeks",
        "I'm so bad at resting, I want to go out",
    ],
};

const VOLUNTEER: Single = Single {
    topic: "volunteer",
    values: &[
        ("food bank", "my feet hurt but it felt good"),
        ("soup kitchen", "met some really cool people"),
        ("community garden", "I'm sunburned but happy"),
        ("children's hospital", "the kids were hilarious"),
        ("river cleanup", "we pulled out a whole shopping cart"),
        ("literacy center", "I'm tutoring a 9 year old"),
        ("wildlife rescue", "I fed a baby owl"),
        ("senior center", "lost at bingo to a 90 year old"),
    ],
    timed: &[
        "spent {when} volunteering at the {key}, {detail}",
        "{When} I did my first volunteer shift at the {key}. {detail}",
    ],
    untimed: &["I've started volunteering at the {key} on weekends, {detail}"],
    ask: &["Where does {n} volunteer?", "What charity work did {n} do?"],
    ask_when: &[
        "When did {n} help out at the {key}?",
        "When did {n} do the unpaid shift?",
    ],
    mood: Mood::Good,
    distract: &[
        "I keep meaning to give back somehow but I'm always so tired",
        "my church is doing some donation drive, they keep emailing",
        "I signed up for another shift next month",
        "they always need more people on weekends",
        "it's nice to do something that isn't work for once",
    ],
};

const VEHICLE: Single = Single {
    topic: "vehicle",
    values: &[
        ("Vespa", "it's mint green"),
        ("Subaru Outback", "only 40k miles on it"),
        ("cargo bike", "the kids ride in the front"),
        ("vintage Volvo", "it smells like old leather"),
        ("electric scooter", "I zip past all the traffic"),
        ("Jeep Wrangler", "no doors all summer"),
        ("camper van", "there's a tiny sink in it"),
        ("Honda Civic", "my first car that isn't a hand-me-down"),
    ],
    timed: &[
        "bought a {key} {when}!! {detail}",
        "{When} I finally caved and bought a {key}, {detail}",
    ],
    untimed: &["just bought a {key}, I'm a proud owner now. {detail}"],
    ask: &["What vehicle has {n} bought?", "What new ride does {n} have?"],
    ask_when: &["When did {n} buy the {key}?", "When did {n} make the big purchase?"],
    mood: Mood::Good,
    distract: &[
        "the bus was 40 minutes late again, I'm losing my mind",
        "gas prices are ridiculous, I might just walk everywhere",
        "someone dinged my door in the parking lot and left",
        "I've been looking at cars online all week",
        "the insurance quote was way higher than I thought",
        "parallel parking is my nemesis",
    ],
};

const GARDEN: Single = Single {
    topic: "garden",
    values: &[
        ("tomatoes", "finally turned red"),
        ("orchid", "bloomed after two years"),
        ("sunflowers", "are taller than me now"),
        ("lemon tree", "has actual lemons on it"),
        ("peonies", "exploded overnight"),
        ("strawberries", "got eaten by squirrels, except three"),
        ("pumpkins", "are the size of beach balls"),
        ("hydrangeas", "turned blue somehow"),
    ],
    timed: &["my {key} {detail} {when}!!", "{When} I noticed my {key} {detail}"],
    untimed: &["update from the backyard: the {key} {detail}"],
    ask: &[
        "What is thriving in {n}'s yard?",
        "Which of {n}'s plants {detail}?",
        "What {detail}, according to {n}?",
    ],
    ask_when: &[
        "When did {n} notice the {key}?",
        "When did {n} notice the good news in the yard?",
    ],
    mood: Mood::Good,
    distract: &[
        "I killed another houseplant. I don't know how, I watered it",
        "my mom keeps giving me cuttings and they all die",
        "spent the whole afternoon weeding, my back hurts",
        "the squirrels are winning the war in the yard",
        "I bought way too many seeds again",
    ],
};

const BABY: Single = Single {
    topic: "baby",
    values: &[
        ("Rosalind", "8 pounds even"),
        ("Ottilie", "she has so much hair"),
        ("Margaux", "two weeks early"),
        ("Wren", "tiny little fingers"),
        ("Beatrix", "she screams like a pterodactyl"),
        ("Imogen", "a whole 9 pounds"),
        ("Cosima", "born at 4am"),
        ("Delphine", "my sister is exhausted"),
    ],
    timed: &[
        "my sister had her baby {when}!! a little girl, they named her {key}. {detail}",
        "{When} I got a niece!!! baby {key}, {detail}",
    ],
    untimed: &["I'm holding baby {key} right now, {detail}"],
    ask: &[
        "What is the name of {n}'s sister's baby?",
        "What did {n}'s sibling call the newborn?",
    ],
    ask_when: &["When was baby {key} born?", "When was {n}'s niece born?"],
    mood: Mood::Good,
    distract: &[
        "everyone I know is having kids right now, it's wild",
        "my coworker brought her baby in today, so cute",
        "my sister is due any day now, we're all on call",
        "I bought the tiniest socks in the world today",
        "family group chat is nothing but baby stuff now",
    ],
};

const MOVE: Single = Single {
    topic: "move",
    values: &[
        ("Tucson", "the lease starts in august"),
        ("Duluth", "right by the lake"),
        ("Asheville", "so many breweries lol"),
        ("Boise", "it's way cheaper there"),
        ("Spokane", "closer to my parents"),
        ("Halifax", "it's a whole new country"),
        ("Burlington", "tiny apartment but cute"),
        ("Chattanooga", "my partner got transferred"),
    ],
    timed: &[
        "signed a lease in {key} {when}, we're moving!! {detail}",
        "{When} we decided: we're moving to {key}. {detail}",
    ],
    untimed: &["so we're packing for {key}, {detail}"],
    ask: &["Where is {n} moving?", "Which city is {n} relocating to?"],
    ask_when: &[
        "When did {n} decide to move to {key}?",
        "When did {n} commit to the relocation?",
    ],
    mood: Mood::Curious,
    distract: &[
        "rent went up again, I might have to find a new place",
        "packing boxes is the worst thing ever invented",
        "we looked at apartments all weekend, all terrible",
        "I'm drowning in cardboard boxes",
        "saying goodbye to the neighbors was weird",
    ],
};

const GIFT: Single = Single {
    topic: "gift",
    values: &[
        ("record player", "my partner"),
        ("espresso machine", "my whole family"),
        ("telescope", "my dad"),
        ("polaroid camera", "my best friend"),
        ("hammock", "my roommates"),
        ("paddleboard", "my brother"),
        ("sewing machine", "my grandma"),
        ("drone", "my coworkers"),
    ],
    timed: &[
        "{detail} got me a {key} for my birthday {when}, I'm obsessed",
        "{When} was my birthday and {detail} surprised me with a {key}!!",
    ],
    untimed: &["best birthday present ever: a {key} from {detail}"],
    ask: &[
        "What did {n} get for their birthday?",
        "What did {n} unwrap on their special day?",
    ],
    ask_when: &[
        "When is {n}'s birthday?",
        "When did {n} celebrate turning a year older?",
    ],
    mood: Mood::Good,
    distract: &[
        "I never know what to get people for their birthday",
        "my birthday always gets forgotten because it's near the holidays",
        "my birthday is coming up and I don't want a party",
        "I'm terrible at pretending I like gifts",
        "we're doing a small dinner for my birthday",
    ],
};

const EXAM: Single = Single {
    topic: "exam",
    values: &[
        ("driving test", "third time's the charm"),
        ("CPA exam", "all four parts done"),
        ("bar exam", "I screamed in the parking lot"),
        ("scuba certification", "the open water part was scary"),
        ("citizenship test", "it's finally official"),
        ("nursing boards", "I'm an RN now"),
        ("black belt test", "my whole dojo cheered"),
        ("sommelier exam", "I can taste dirt in wine now apparently"),
    ],
    timed: &[
        "passed my {key} {when}!! {detail}",
        "{When} I found out I passed the {key}. {detail}",
    ],
    untimed: &["guess who passed the {key}? me. {detail}"],
    ask: &["What did {n} pass?", "Which assessment did {n} succeed at?"],
    ask_when: &[
        "When did {n} pass the {key}?",
        "When did {n} get the good news about the results?",
    ],
    mood: Mood::Good,
    distract: &[
        "studying for anything after college feels impossible",
        "I had a dream I was late for a final again, why does that still happen",
        "studying every night this week, I'm fried",
        "my study group meets at 7am, who agreed to this",
        "flashcards everywhere, my room looks like a crime board",
    ],
};

const WILDLIFE: Single = Single {
    topic: "wildlife",
    values: &[
        ("moose", "like twenty feet away"),
        ("black bear", "we backed away so slowly"),
        ("bald eagle", "it caught a fish right in front of us"),
        ("rattlesnake", "it was sunbathing on the trail"),
        ("family of otters", "they were playing in the creek"),
        ("porcupine", "it waddled right past us"),
        ("bobcat", "it just stared at us"),
        ("elk herd", "the males were fighting"),
    ],
    timed: &[
        "went hiking {when} and saw a {key}, {detail}",
        "{When} on our hike we ran into a {key}. {detail}",
    ],
    untimed: &["the coolest thing on our hike was a {key}, {detail}"],
    ask: &[
        "What animal did {n} see on a hike?",
        "Which wild animal did {n} encounter?",
    ],
    ask_when: &[
        "When did {n} see the {key}?",
        "When did {n} have the close encounter in nature?",
    ],
    mood: Mood::Curious,
    distract: &[
        "there's a raccoon that keeps getting into our trash",
        "I want to go hiking more but I always sleep in",
        "we're going hiking again next weekend if it doesn't rain",
        "bought new hiking boots, breaking them in now",
        "the trail was so muddy my shoes are ruined",
    ],
};

const TATTOO: Single = Single {
    topic: "tattoo",
    values: &[
        ("paper airplane", "on my wrist"),
        ("pine tree", "on my ankle"),
        ("compass rose", "on my shoulder"),
        ("hummingbird", "behind my ear"),
        ("crescent moon", "on my finger"),
        ("octopus", "on my forearm"),
        ("sunflower outline", "on my ribs, ouch"),
        ("tiny anchor", "for my grandpa"),
    ],
    timed: &[
        "got my first tattoo {when}, a {key} {detail}",
        "{When} I finally got a tattoo. a little {key} {detail}. my mom is going to freak",
    ],
    untimed: &["new tattoo: a {key} {detail}"],
    ask: &["What tattoo did {n} get?", "What image is in {n}'s body art?"],
    ask_when: &["When did {n} get the {key} tattoo?", "When did {n} get inked?"],
    mood: Mood::Good,
    distract: &[
        "I keep thinking about getting a tattoo but I'm scared of needles",
        "my coworker has like thirty tattoos and they're all amazing",
        "I've been sketching tattoo ideas all week",
        "the tattoo shop down the street has a waitlist",
        "my mom still asks if tattoos are permanent lol",
    ],
};

const SINGLES: [&Single; 18] = [
    &RACE,
    &PET,
    &INSTRUMENT,
    &TRIP,
    &JOB,
    &COOKING,
    &BOOK,
    &CONCERT,
    &INJURY,
    &VOLUNTEER,
    &VEHICLE,
    &GARDEN,
    &BABY,
    &MOVE,
    &GIFT,
    &EXAM,
    &WILDLIFE,
    &TATTOO,
];

/// A shared photo whose caption alone says the answer.
struct Photo {
    /// (key, caption with `{key}`).
    values: &'static [(&'static str, &'static str)],
    /// What the speaker writes with the photo; never the key.
    remarks: &'static [&'static str],
    ask: &'static [&'static str],
}

const PHOTO_CRAFT: Photo = Photo {
    values: &[
        ("teapot", "a photo of a speckled blue ceramic {key} on a kitchen table"),
        ("fruit bowl", "a photo of a wide green glazed {key} with a chipped rim"),
        ("flower vase", "a photo of a tall white {key} with painted leaves"),
        ("set of mugs", "a photo of a {key} in different shades of orange"),
        ("soap dish", "a photo of a small terracotta {key} shaped like a leaf"),
        ("candle holder", "a photo of a lumpy purple {key} on a windowsill"),
    ],
    remarks: &[
        "look what came out of the kiln {when}!",
        "ok it's not perfect but I made this {when}",
        "my pottery class project is finally done",
    ],
    ask: &[
        "What did {n} make out of clay?",
        "What object did {n} create in the ceramics studio?",
        "What ceramic piece did {n} make?",
        "What clay piece is in the photo {n} shared?",
    ],
};

const PHOTO_VIEW: Photo = Photo {
    values: &[
        ("glacier lake", "a photo of a turquoise {key} surrounded by pine trees"),
        ("sandstone arch", "a photo of a red {key} under a clear sky"),
        ("lighthouse", "a photo of a striped {key} on a rocky cliff at sunset"),
        ("waterfall", "a photo of a tall {key} falling into a misty canyon"),
        (
            "volcano",
            "a photo of a snow-capped {key} behind a field of wildflowers",
        ),
        ("sand dunes", "a photo of rippled {key} stretching to the horizon"),
    ],
    remarks: &[
        "the view from our campsite {when}",
        "woke up to this {when}, not even mad about the 5am alarm",
        "this is why I drove nine hours",
    ],
    ask: &[
        "What landmark did {n}'s campsite overlook?",
        "What scenery did {n} wake up to while camping?",
        "What was in the photo from {n}'s camping trip?",
    ],
};

const PHOTO_NAP: Photo = Photo {
    values: &[
        (
            "laundry basket",
            "a photo of a ginger cat asleep in a {key} full of clean towels",
        ),
        ("guitar case", "a photo of a small dog curled up inside an open {key}"),
        ("bathroom sink", "a photo of a black cat squeezed into a {key}"),
        (
            "cardboard box",
            "a photo of a grey kitten sleeping in a {key} much too small for it",
        ),
        ("suitcase", "a photo of a fluffy dog lying in a half-packed {key}"),
        ("flower pot", "a photo of a tabby cat napping in an empty {key}"),
    ],
    remarks: &[
        "this is what I came home to {when} lol",
        "he has a perfectly good bed. perfectly good bed.",
        "caught in the act {when}",
    ],
    ask: &[
        "Where was {n}'s pet sleeping in the picture?",
        "Where did {n} find the animal napping?",
        "Where was {n}'s pet asleep in the photo?",
        "In the photo {n} shared, where was the animal?",
    ],
};

const PHOTO_BAKE: Photo = Photo {
    values: &[
        (
            "lemon meringue pie",
            "a photo of a {key} with golden peaks on a cooling rack",
        ),
        (
            "blueberry pancakes",
            "a photo of a tall stack of {key} with maple syrup",
        ),
        (
            "carrot cake",
            "a photo of a three-layer {key} with cream cheese frosting",
        ),
        ("cinnamon rolls", "a photo of a tray of gooey {key} fresh from the oven"),
        ("fig tart", "a photo of a {key} with sliced fruit arranged in a spiral"),
        ("cheesecake", "a photo of a {key} topped with cherries"),
    ],
    remarks: &[
        "kind of proud of this one {when}",
        "baked something {when}, it's already half gone",
        "my kitchen is a disaster but look",
    ],
    ask: &[
        "What treat did {n} show off?",
        "What did {n} bake?",
        "What dessert is in {n}'s photo?",
    ],
};

const PHOTO_SIGN: Photo = Photo {
    values: &[
        (
            "hockey game",
            "a photo of two tickets to a {key} held up in front of an arena",
        ),
        (
            "ballet recital",
            "a photo of a printed program for a {key} with a pink ribbon",
        ),
        ("comedy club", "a photo of a neon sign outside a {key} at night"),
        ("planetarium", "a photo of the domed entrance of a {key} with a queue"),
        ("rodeo", "a photo of a poster for a county {key} on a wooden fence"),
        ("escape room", "a photo of a group posing in front of an {key} door"),
    ],
    remarks: &[
        "guess where we went {when}!",
        "{When}. best date night in ages",
        "spontaneous plans are the best plans",
    ],
    ask: &[
        "Where did {n} go for the outing?",
        "What kind of venue did {n} visit for fun?",
        "Where did {n} go on the spontaneous date?",
        "What place does {n}'s photo show?",
    ],
};

const PHOTOS: [&Photo; 5] = [&PHOTO_CRAFT, &PHOTO_VIEW, &PHOTO_NAP, &PHOTO_BAKE, &PHOTO_SIGN];

const COUSINS: [&str; 8] = [
    "Dario",
    "Leontyne",
    "Ambrose",
    "Philippa",
    "Cormac",
    "Esperanza",
    "Thaddeus",
    "Octavia",
];
const WEDDING_FEATURES: [(&str, &str); 6] = [
    ("taco truck", "instead of a cake they had a {key}"),
    ("donut wall", "there was a {key} and I ate like nine"),
    ("mariachi band", "a {key} showed up during dinner"),
    ("petting zoo", "they had a {key} for the kids, and honestly the adults"),
    ("silent disco", "the reception was a {key}, everyone in headphones"),
    ("fireworks show", "a surprise {key} at midnight"),
];
const FRIENDS: [&str; 8] = [
    "Anouk", "Benedikt", "Marisol", "Casimir", "Lucinda", "Evander", "Saoirse", "Ignatius",
];
const FRIEND_CITIES: [&str; 8] = [
    "Albuquerque",
    "Pittsburgh",
    "Anchorage",
    "Milwaukee",
    "Sacramento",
    "Louisville",
    "Tallahassee",
    "Providence",
];
const MANAGERS: [&str; 8] = [
    "Rosalie",
    "Gideon",
    "Perpetua",
    "Lazarus",
    "Henrietta",
    "Barnaby",
    "Clementine",
    "Ezekiel",
];
const MANAGER_HABITS: [&str; 6] = [
    "is kind of a micromanager",
    "brings donuts every friday",
    "sends emails at midnight",
    "remembers everyone's birthday",
    "talks about her sailboat nonstop",
    "makes us do standups standing on one foot, I'm not kidding",
];
const CHEWED: [&str; 6] = [
    "headphone cable",
    "passport",
    "left sneaker",
    "tv remote",
    "library book",
    "couch cushion",
];

const INSTRUMENTS_AGG: [&str; 8] = [
    "violin",
    "bass guitar",
    "drum kit",
    "flute",
    "keyboard synth",
    "clarinet",
    "tuba",
    "steel drums",
];
const AGG_INSTRUMENT_LINES: [&str; 3] = [
    "I've played {key} since middle school, still love it",
    "picked up a cheap {key} at a garage sale {when}, teaching myself to play",
    "our little band needed someone to play {key} so guess who volunteered",
];
const SPORTS_AGG: [&str; 8] = [
    "rock climbing",
    "ultimate frisbee",
    "fencing",
    "water polo",
    "curling",
    "archery",
    "rowing",
    "handball",
];
const AGG_SPORT_LINES: [&str; 3] = [
    "tried {key} for the first time {when}, what a sport. I'm so sore",
    "joined a rec league for {key}, we lost 12 to 1 lol",
    "I've been doing {key} twice a week, it's my new sport",
];
const CITIES_AGG: [&str; 8] = [
    "Copenhagen",
    "New Orleans",
    "Vancouver",
    "Marrakech",
    "Edinburgh",
    "Kyoto",
    "Buenos Aires",
    "Prague",
];
const AGG_CITY_LINES: [&str; 3] = [
    "back from a work trip to {key}, so tired",
    "spent the long weekend in {key} {when}, ate way too much",
    "my sister dragged me to {key} for her birthday, it was great actually",
];
const LANGUAGES_AGG: [&str; 8] = [
    "Portuguese",
    "Korean",
    "Swahili",
    "Icelandic",
    "Tagalog",
    "Hungarian",
    "Welsh",
    "Turkish",
];
const AGG_LANGUAGE_LINES: [&str; 3] = [
    "my duolingo streak for {key} is at 100 days!!",
    "started learning {key} at the community college {when}",
    "I've been watching shows in {key} to practice the language, understood like one word",
];

const CLASSES: [&str; 10] = [
    "pottery wheel",
    "salsa dancing",
    "improv comedy",
    "kickboxing",
    "woodworking",
    "aerial silks",
    "sign language",
    "figure drawing",
    "glassblowing",
    "beekeeping",
];
const WEEKDAYS: [&str; 5] = ["monday", "tuesday", "wednesday", "thursday", "friday"];
const SATURDAYS: [&str; 10] = [
    "kayaking on the reservoir",
    "at a pumpkin patch",
    "assembling an ikea wardrobe",
    "at a flea market",
    "repainting the fence",
    "at a corn maze",
    "binge watching a baking show",
    "at a strawberry farm",
    "cleaning out the garage",
    "at a board game cafe",
];
const COMFORT_FOODS: [&str; 10] = [
    "mac and cheese",
    "chicken noodle soup",
    "grilled cheese",
    "pad thai",
    "mashed potatoes",
    "wonton soup",
    "lasagna",
    "dumplings",
    "chili",
    "french toast",
];

/// Builds the events of one conversation.
pub struct Cx<'a> {
    rng: &'a mut Rng,
    names: [String; 2],
    dates: &'a [NaiveDate],
    /// Evidence beats placed in each session so far.
    load: Vec<usize>,
}

/// A relative time said in a session, and the day it means.
struct When {
    phrase: String,
    date: NaiveDate,
}

fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = template.to_owned();
    for (name, value) in vars {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

/// A generated line as it is said: first letter in upper case, "a" before a vowel made "an".
fn tidy(text: &str) -> String {
    let words: Vec<&str> = text.split(' ').collect();
    let fixed: Vec<&str> = words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let vowel_next = words
                .get(i + 1)
                .and_then(|n| n.chars().next())
                .is_some_and(|c| "aeiouAEIOU".contains(c));
            match *w {
                "a" if vowel_next => "an",
                "A" if vowel_next => "An",
                other => other,
            }
        })
        .collect();
    capitalized(&fixed.join(" "))
}

/// `text` with its first letter in upper case.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// "13 May 2024" or "May 13".
fn spoken_date(rng: &mut Rng, d: NaiveDate) -> String {
    let month = MONTHS_EN[d.month0() as usize];
    if rng.chance(0.6) {
        format!("{} {month} {}", d.day(), d.year())
    } else {
        format!("{month} {}", d.day())
    }
}

fn weekday_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Mon => "Monday",
        Weekday::Tue => "Tuesday",
        Weekday::Wed => "Wednesday",
        Weekday::Thu => "Thursday",
        Weekday::Fri => "Friday",
        Weekday::Sat => "Saturday",
        Weekday::Sun => "Sunday",
    }
}

impl<'a> Cx<'a> {
    pub fn new(rng: &'a mut Rng, names: [String; 2], dates: &'a [NaiveDate]) -> Self {
        let load = vec![0; dates.len()];
        Self {
            rng,
            names,
            dates,
            load,
        }
    }

    fn sessions(&self) -> usize {
        self.dates.len()
    }

    /// A session in `lo..hi` with the fewest evidence beats so far (ties broken at random).
    fn session(&mut self, lo: usize, hi: usize) -> usize {
        let hi = hi.clamp(lo + 1, self.sessions());
        let least = (lo..hi).map(|s| self.load[s]).min().unwrap_or(0);
        let candidates: Vec<usize> = (lo..hi).filter(|&s| self.load[s] <= least + 1).collect();
        let s = *self.rng.pick(&candidates);
        self.load[s] += 1;
        s
    }

    /// `n` distinct sessions spread over the history, in order.
    fn spread(&mut self, n: usize) -> Vec<usize> {
        let total = self.sessions();
        (0..n)
            .map(|i| self.session(total * i / n, total * (i + 1) / n))
            .collect()
    }

    fn when(&mut self, session: usize) -> When {
        let day = self.dates[session];
        let back = |days: u64| day - Days::new(days);
        match self.rng.below(10) {
            0 => When {
                phrase: "yesterday".into(),
                date: back(1),
            },
            1 => When {
                phrase: "last night".into(),
                date: back(1),
            },
            2 => When {
                phrase: "this morning".into(),
                date: day,
            },
            3 => When {
                phrase: "two days ago".into(),
                date: back(2),
            },
            4 | 5 => {
                // "last Saturday": the latest such day before the session.
                let weekday = *self.rng.pick(&[Weekday::Sat, Weekday::Sun, Weekday::Fri, Weekday::Tue]);
                let mut d = back(1);
                while d.weekday() != weekday {
                    d = d - Days::new(1);
                }
                When {
                    phrase: format!("last {}", weekday_name(weekday)),
                    date: d,
                }
            }
            6 => When {
                phrase: "a week ago".into(),
                date: back(7),
            },
            7 => When {
                phrase: "two weeks ago".into(),
                date: back(14),
            },
            8 => When {
                phrase: "over the weekend".into(),
                date: {
                    let mut d = back(1);
                    while d.weekday() != Weekday::Sat {
                        d = d - Days::new(1);
                    }
                    d
                },
            },
            _ => When {
                phrase: "today".into(),
                date: day,
            },
        }
    }

    fn reply(&mut self, mood: Mood) -> String {
        let pool: &[&str] = match mood {
            Mood::Good => &REPLIES_GOOD,
            Mood::Bad => &REPLIES_BAD,
            Mood::Curious => &REPLIES_CURIOUS,
            Mood::Photo => &REPLIES_PHOTO,
        };
        self.rng.pick(pool).to_string()
    }

    fn name(&self, who: usize) -> &str {
        &self.names[who]
    }

    fn beat(&mut self, session: usize, who: usize, content: String, caption: Option<String>, mood: Mood) -> Beat {
        let reply = self.reply(mood);
        Beat {
            session,
            lines: [
                Line {
                    speaker: who,
                    content,
                    caption,
                },
                Line {
                    speaker: 1 - who,
                    content: reply,
                    caption: None,
                },
            ],
        }
    }

    /// A same-topic line in a session other than `avoid`, by either speaker (`who` is the one
    /// the event is about).
    fn distractor(&mut self, line: &str, who: usize, avoid: usize) -> Beat {
        let total = self.sessions();
        let mut session = self.rng.below(total);
        if session == avoid {
            session = (session + 1 + self.rng.below(total - 1)) % total;
        }
        let speaker = if self.rng.chance(0.5) { 1 - who } else { who };
        let reply = self.rng.pick(&REPLIES_DISTRACTOR).to_string();
        Beat {
            session,
            lines: [
                Line {
                    speaker,
                    content: tidy(line),
                    caption: None,
                },
                Line {
                    speaker: 1 - speaker,
                    content: reply,
                    caption: None,
                },
            ],
        }
    }

    fn question(&self, template: &str, who: usize) -> String {
        self.question_with(template, who, &[])
    }

    fn question_with(&self, template: &str, who: usize, vars: &[(&str, &str)]) -> String {
        let mut all = vec![("n", self.name(who))];
        all.extend_from_slice(vars);
        fill(template, &all)
    }

    /// A temporal question: "When did …?" (answered by the date), or the single-fact question
    /// with the date in it.
    fn temporal(&mut self, family: &Single, who: usize, key: &str, detail: &str, date: NaiveDate) -> String {
        if self.rng.chance(0.7) {
            // Most "when" questions name the event, as people ask them.
            let t = if self.rng.chance(0.6) {
                family.ask_when[0]
            } else {
                *self.rng.pick(family.ask_when)
            };
            self.question_with(t, who, &[("key", key), ("detail", detail)])
        } else {
            let t = *self.rng.pick(family.ask);
            let spoken = spoken_date(self.rng, date);
            let q = self.question_with(t, who, &[("detail", detail)]);
            format!("{} on {spoken}?", q.trim_end_matches('?'))
        }
    }

    fn single(&mut self, family: &Single, who: usize) -> Event {
        let (key, detail) = *self.rng.pick(family.values);
        let session = self.session(0, self.sessions());
        let timed = self.rng.chance(0.75) || family.untimed.is_empty();
        let (content, date) = if timed {
            let when = self.when(session);
            let upper = capitalized(&when.phrase);
            let t = *self.rng.pick(family.timed);
            let text = fill(
                t,
                &[
                    ("When", upper.as_str()),
                    ("when", when.phrase.as_str()),
                    ("key", key),
                    ("detail", detail),
                ],
            );
            (text, Some(when.date))
        } else {
            let t = *self.rng.pick(family.untimed);
            (fill(t, &[("key", key), ("detail", detail)]), None)
        };
        let mut event = Event {
            beats: vec![self.beat(session, who, tidy(&content), None, family.mood)],
            questions: Vec::new(),
        };
        let ask = *self.rng.pick(family.ask);
        event.questions.push(QPlan {
            kind: ChatKind::SingleFact,
            text: self.question_with(ask, who, &[("detail", detail)]),
            evidence: vec![(0, 0)],
            answers: vec![key.to_owned()],
            date: None,
        });
        if let Some(date) = date {
            if self.rng.chance(0.8) {
                let text = self.temporal(family, who, key, detail, date);
                event.questions.push(QPlan {
                    kind: ChatKind::Temporal,
                    text,
                    evidence: vec![(0, 0)],
                    answers: vec![key.to_owned()],
                    date: Some(date),
                });
            }
        }
        // People come back to their themes: a few lines on the same topic, without the key,
        // in other sessions.
        let count = self.rng.range(1, 3);
        for line in self.rng.sample(family.distract, count) {
            let beat = self.distractor(line, who, session);
            event.beats.push(beat);
        }
        event
    }

    fn photo(&mut self, family: &Photo, who: usize) -> Event {
        let (key, caption) = *self.rng.pick(family.values);
        let session = self.session(0, self.sessions());
        let when = self.when(session);
        let upper = capitalized(&when.phrase);
        let template = *self.rng.pick(family.remarks);
        let remark = fill(template, &[("When", upper.as_str()), ("when", when.phrase.as_str())]);
        let caption = fill(caption, &[("key", key)]);
        let beat = self.beat(session, who, tidy(&remark), Some(caption), Mood::Photo);
        let ask = *self.rng.pick(family.ask);
        Event {
            beats: vec![beat],
            questions: vec![QPlan {
                kind: ChatKind::Caption,
                text: self.question(ask, who),
                evidence: vec![(0, 0)],
                answers: vec![key.to_owned()],
                date: None,
            }],
        }
    }

    /// Two lines in two sessions; the question needs the first to make sense of the second.
    fn multi_hop(&mut self, variant: usize, who: usize) -> Event {
        let n = self.sessions();
        let first = self.session(0, n / 2);
        let second = self.session((first + 2).min(n - 1), n);
        let (a, b, answers, ask, company) = match variant % 4 {
            0 => {
                let (name, breed) = *self.rng.pick(PET.values);
                let item = *self.rng.pick(&CHEWED);
                (
                    format!("We adopted a {breed} from the rescue, her name is {name}"),
                    format!("{name} ate my {item} last night. I could scream"),
                    vec![name.to_owned(), item.to_owned()],
                    *self.rng.pick(&[
                        "What did the animal {n} adopted destroy?",
                        "What belonging of {n}'s got ruined by the rescue pet?",
                    ]),
                    "",
                )
            }
            1 => {
                let cousin = *self.rng.pick(&COUSINS);
                let (feature, t) = *self.rng.pick(&WEDDING_FEATURES);
                (
                    format!("My cousin {cousin} just got engaged!! the wedding is this fall"),
                    format!("Back from {cousin}'s wedding, {}", fill(t, &[("key", feature)])),
                    vec![cousin.to_owned(), feature.to_owned()],
                    *self.rng.pick(&[
                        "What surprise was there at the marriage ceremony of {n}'s relative?",
                        "What was special at {n}'s cousin's celebration?",
                    ]),
                    "",
                )
            }
            2 => {
                let friend = *self.rng.pick(&FRIENDS);
                let city = *self.rng.pick(&FRIEND_CITIES);
                (
                    format!("My best friend {friend} moved to {city} and I'm so sad"),
                    format!("Booked flights to go see {friend} next month!!"),
                    vec![friend.to_owned(), city.to_owned()],
                    *self.rng.pick(&[
                        "Which city is {n} flying to, to see their best friend?",
                        "Where is {n} travelling to visit a close pal?",
                    ]),
                    "",
                )
            }
            _ => {
                let (company, _) = *self.rng.pick(JOB.values);
                let manager = *self.rng.pick(&MANAGERS);
                let habit = *self.rng.pick(&MANAGER_HABITS);
                (
                    format!("First week at {company} done, everyone is nice so far"),
                    format!("My new boss {manager} {habit}"),
                    vec![company.to_owned(), manager.to_owned()],
                    *self.rng.pick(&[
                        "Who supervises {n} at the company that hired them?",
                        "What is the name of {n}'s manager at the new employer?",
                        "Who is {n}'s boss at {company}?",
                    ]),
                    company,
                )
            }
        };
        let beats = vec![
            self.beat(first, who, tidy(&a), None, Mood::Curious),
            self.beat(second, who, tidy(&b), None, Mood::Curious),
        ];
        Event {
            beats,
            questions: vec![QPlan {
                kind: ChatKind::MultiHop,
                text: self.question_with(ask, who, &[("company", company)]),
                evidence: vec![(0, 0), (1, 0)],
                answers,
                date: None,
            }],
        }
    }

    /// Two or three lines in different sessions that together answer the question.
    fn aggregation(&mut self, variant: usize, who: usize) -> Event {
        let (pool, lines, ask): (&[&str], &[&str], &[&str]) = match variant % 4 {
            0 => (
                &INSTRUMENTS_AGG[..],
                &AGG_INSTRUMENT_LINES[..],
                &["What instruments can {n} play?", "Which instruments does {n} know?"][..],
            ),
            1 => (
                &SPORTS_AGG[..],
                &AGG_SPORT_LINES[..],
                &[
                    "Which sports has {n} taken up?",
                    "What athletic activities does {n} do?",
                ][..],
            ),
            2 => (
                &CITIES_AGG[..],
                &AGG_CITY_LINES[..],
                &[
                    "Which cities has {n} been to?",
                    "Where has {n} spent time away?",
                    "Where did {n} go on trips?",
                ][..],
            ),
            _ => (
                &LANGUAGES_AGG[..],
                &AGG_LANGUAGE_LINES[..],
                &[
                    "Which foreign tongues is {n} studying?",
                    "What languages is {n} learning?",
                ][..],
            ),
        };
        let count = self.rng.range(2, 3);
        let keys = self.rng.sample(pool, count);
        let mut templates = lines.to_vec();
        self.rng.shuffle(&mut templates);
        let sessions = self.spread(count);
        let mut beats = Vec::new();
        for ((&key, template), session) in keys.iter().zip(templates).zip(sessions) {
            let when = self.when(session);
            let content = fill(template, &[("key", key), ("when", when.phrase.as_str())]);
            beats.push(self.beat(session, who, tidy(&content), None, Mood::Curious));
        }
        let ask = *self.rng.pick(ask);
        Event {
            questions: vec![QPlan {
                kind: ChatKind::Aggregation,
                text: self.question(ask, who),
                evidence: (0..beats.len()).map(|b| (b, 0)).collect(),
                answers: keys.iter().map(|k| k.to_string()).collect(),
                date: None,
            }],
            beats,
        }
    }

    /// Both people say the same kind of thing, one right after the other; each is asked about
    /// their own.
    fn speakers(&mut self, variant: usize, who: usize) -> Event {
        let session = self.session(0, self.sessions());
        let (first, second, keys, ask) = match variant % 3 {
            0 => {
                let classes = self.rng.sample(&CLASSES, 2);
                let days = self.rng.sample(&WEEKDAYS, 2);
                (
                    format!("I signed up for a {} class, it's on {} nights", classes[0], days[0]),
                    format!("no way, I just signed up for a {} class on {}s!", classes[1], days[1]),
                    classes,
                    *self
                        .rng
                        .pick(&["What class did {n} sign up for?", "Which weekly class is {n} taking?"]),
                )
            }
            1 => {
                let days = self.rng.sample(&SATURDAYS, 2);
                (
                    format!("Spent all of saturday {}", days[0]),
                    format!("ha, my saturday was {}", days[1]),
                    days,
                    *self.rng.pick(&[
                        "How did {n} spend saturday?",
                        "What did {n} do over the weekend?",
                        "What was {n} up to all saturday?",
                    ]),
                )
            }
            _ => {
                let foods = self.rng.sample(&COMFORT_FOODS, 2);
                (
                    format!("When I'm sad the only thing that helps is {}", foods[0]),
                    format!("for me it's {}, it always helps", foods[1]),
                    foods,
                    *self.rng.pick(&[
                        "What helps {n} when sad?",
                        "What is {n}'s go-to meal on a bad day?",
                        "What food always helps {n}?",
                    ]),
                )
            }
        };
        let beat = Beat {
            session,
            lines: [
                Line {
                    speaker: who,
                    content: capitalized(&first),
                    caption: None,
                },
                Line {
                    speaker: 1 - who,
                    content: capitalized(&second),
                    caption: None,
                },
            ],
        };
        let questions = [who, 1 - who]
            .into_iter()
            .zip(keys)
            .enumerate()
            .map(|(line, (speaker, key))| QPlan {
                kind: ChatKind::SpeakerConfusion,
                text: self.question(ask, speaker),
                evidence: vec![(0, line)],
                answers: vec![key.to_owned()],
                date: None,
            })
            .collect();
        Event {
            beats: vec![beat],
            questions,
        }
    }
}

/// How many events of each kind a conversation gets.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    pub singles: usize,
    pub photos: usize,
    pub hops: usize,
    pub aggregations: usize,
    pub pairs: usize,
}

/// The events of one conversation: single facts, photos, multi-hop, aggregation and
/// speaker-confusion events, in that order, about both people.
pub fn plan(cx: &mut Cx, mix: Mix) -> Vec<Event> {
    let hop_variants: Vec<usize> = {
        let offset = cx.rng.below(4);
        (0..mix.hops).map(|i| (offset + i) % 4).collect()
    };
    let aggregation_variants: Vec<usize> = {
        let offset = cx.rng.below(4);
        (0..mix.aggregations).map(|i| (offset + i) % 4).collect()
    };
    // A topic is told once per conversation: the multi-hop pet and job stories and the
    // instrument and city lists leave their single-fact family out, so that no other turn
    // answers their questions too.
    let taken = |topic: &str| match topic {
        "pet" => hop_variants.contains(&0),
        "job" => hop_variants.contains(&3),
        "instrument" => aggregation_variants.contains(&0),
        "trip" => aggregation_variants.contains(&2),
        _ => false,
    };
    let mut families: Vec<&Single> = SINGLES.iter().copied().filter(|f| !taken(f.topic)).collect();
    cx.rng.shuffle(&mut families);
    let mut events = Vec::new();
    for (i, family) in families.into_iter().take(mix.singles).enumerate() {
        let who = (i + cx.rng.below(2)) % 2;
        events.push(cx.single(family, who));
    }
    let mut photo_families = PHOTOS.to_vec();
    cx.rng.shuffle(&mut photo_families);
    for (i, family) in photo_families.into_iter().take(mix.photos).enumerate() {
        events.push(cx.photo(family, i % 2));
    }
    for (i, variant) in hop_variants.into_iter().enumerate() {
        events.push(cx.multi_hop(variant, (i + 1) % 2));
    }
    for (i, variant) in aggregation_variants.into_iter().enumerate() {
        events.push(cx.aggregation(variant, i % 2));
    }
    let offset = cx.rng.below(3);
    for i in 0..mix.pairs {
        events.push(cx.speakers(offset + i, (i + 1) % 2));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_resolve_before_the_session() {
        let dates: Vec<NaiveDate> = (0..20)
            .map(|i| NaiveDate::from_ymd_opt(2024, 3, 4).unwrap() + Days::new(i * 9))
            .collect();
        let mut rng = Rng::new(5);
        let mut cx = Cx::new(&mut rng, ["Ana".into(), "Tom".into()], &dates);
        for (s, &day) in dates.iter().enumerate() {
            let when = cx.when(s);
            let gap = (day - when.date).num_days();
            assert!((0..=14).contains(&gap), "{} -> {gap}", when.phrase);
            if let Some(day) = when.phrase.strip_prefix("last ").filter(|d| *d != "night") {
                assert_eq!(weekday_name(when.date.weekday()), day);
                assert!(gap >= 1);
            }
        }
    }

    #[test]
    fn lines_read_well() {
        assert_eq!(
            tidy("bought a electric scooter, a Vespa"),
            "Bought an electric scooter, a Vespa"
        );
        assert_eq!(tidy("a owl"), "An owl");
    }

    #[test]
    fn templates_fill_every_slot() {
        let all = SINGLES
            .iter()
            .flat_map(|f| f.timed.iter().chain(f.untimed).chain(f.ask).chain(f.ask_when))
            .chain(PHOTOS.iter().flat_map(|p| p.remarks.iter().chain(p.ask)));
        for t in all {
            let filled = fill(
                t,
                &[("When", "X"), ("when", "x"), ("key", "k"), ("detail", "d"), ("n", "N")],
            );
            assert!(!filled.contains('{'), "{t}");
        }
    }
}
