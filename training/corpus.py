"""The training corpus of the default model: chat examples generated here.

Every example is a conversation (`messages`, optional `tools`) whose last
message is the assistant's answer. Categories mirror the default probe suite:
recitation, counting, sequence (primes), tool_call, prose_en, prose_zh. All
text is written or templated in this file (no downloads, licence-clean).

Held-out guarantee: the default probes (``probes/default.toml``) are not in
the corpus. `generate` drops every example whose user message is one of
`HELD_OUT_PROMPTS` (the probes' prompts, in any category) or whose task
instance is one of `HELD_OUT_VALUES` (the probes' word and count, counting
range, primes bound, tool call: in every prompt wording), so each probe is
answered by combining wordings and values seen apart, not by recall. (An
answer can still occur for a different task: "primes up to 37" has the same
answer as the held-out "primes below 40".) `check_held_out` verifies the
prompts against a probe file.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

SEED = 1234

# Examples per category, before held-out filtering.
COUNTS: dict[str, int] = {
    "recitation": 1800,
    "counting": 7200,
    "sequence": 4000,
    "tool_call": 1600,
    "prose_en": 600,
    "prose_zh": 600,
}

HELD_OUT_PROMPTS: frozenset[str] = frozenset(
    {
        "Repeat the word apple 5 times.",
        'Say "river" 7 times.',
        "Count from 17 to 29.",
        "List the numbers from 96 to 104.",
        "List the prime numbers below 40.",
        "What is the weather in Lisbon in fahrenheit?",
        "Convert 250 USD to JPY.",
        "Search the web for cheap flights to Tokyo.",
        "Write two sentences about the ocean.",
        "请用两句话介绍一下月亮。",
    }
)
HELD_OUT_VALUES: frozenset[tuple[Any, ...]] = frozenset(
    {
        ("recitation", "apple", 5),
        ("recitation", "river", 7),
        ("counting", 17, 29),
        ("counting", 96, 104),
        ("primes", "below", 40),
        ("tool_call", "get_weather", '{"city": "Lisbon", "unit": "fahrenheit"}'),
        (
            "tool_call",
            "convert_currency",
            '{"amount": 250, "from_currency": "USD", "to_currency": "JPY"}',
        ),
        ("tool_call", "search_web", '{"query": "cheap flights to Tokyo"}'),
    }
)


@dataclass
class Example:
    """One conversation; the last message is the assistant turn to learn."""

    category: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    values: tuple[Any, ...] = ()  # the task instance, e.g. ("counting", 17, 29)

    @property
    def prompt_messages(self) -> list[dict[str, Any]]:
        """Everything before the assistant answer."""
        return self.messages[:-1]

    @property
    def user_text(self) -> str:
        """The (last) user message."""
        return [m for m in self.messages if m["role"] == "user"][-1]["content"]

    @property
    def answer(self) -> str:
        """The assistant's text answer ('' for a pure tool call)."""
        return self.messages[-1].get("content") or ""


def _chat(category: str, user: str, answer: str, values: tuple[Any, ...]) -> Example:
    return Example(
        category,
        [{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
        values=values,
    )


# --------------------------------------------------------------------------
# recitation
# --------------------------------------------------------------------------

WORDS = (
    "apple banana cherry river mountain cloud stone forest garden window table chair "
    "orange lemon paper pencil candle rocket planet comet ocean island bridge castle "
    "dragon tiger rabbit turtle falcon eagle spider violin guitar piano drum trumpet "
    "silver golden purple yellow green blue red happy sunny quiet gentle brave swift "
    "hello thanks yes no maybe always never today tomorrow morning evening night "
    "coffee tea bread butter honey sugar salt pepper water fire earth wind snow rain "
    "thunder light shadow mirror marble velvet cotton copper iron crystal pearl ruby "
    "north south east west left right up down alpha beta gamma delta omega sigma "
    "zebra koala panda otter moose walrus lizard parrot robin sparrow owl swan"
).split()

NUMBER_WORDS = {
    2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine",
}

RECITE_TEMPLATES: tuple[str, ...] = (
    "Repeat the word {w} {n} times.",
    'Say "{w}" {n} times.',
    'Write the word "{w}" {n} times, separated by spaces.',
    "Please repeat {w} exactly {n} times.",
    'Recite "{w}" {n} times.',
    "Repeat the word {w} {nw} times.",
    "Say {w} {nw} times.",
    "Type {w} {n} times in a row.",
)


def recitation(rng: random.Random) -> Example:
    """Repeat a word N times, separated by single spaces."""
    w, n = rng.choice(WORDS), rng.randint(2, 9)
    user = rng.choice(RECITE_TEMPLATES).format(w=w, n=n, nw=NUMBER_WORDS[n])
    return _chat("recitation", user, " ".join([w] * n), ("recitation", w, n))


# --------------------------------------------------------------------------
# counting
# --------------------------------------------------------------------------

COUNT_TEMPLATES: tuple[str, ...] = (
    "Count from {a} to {b}.",
    "Count from {a} up to {b}.",
    "List the numbers from {a} to {b}.",
    "Please count from {a} to {b}, separated by commas.",
    "Write the integers from {a} to {b}.",
    "Count up from {a} to {b}.",
)


COUNT_MAX = 199  # the largest b; counts cross 100 (a probe does: 96 to 104)


def counting(rng: random.Random) -> Example:
    """Count from a to b (0 <= a < b <= COUNT_MAX): the numbers separated by ", "."""
    length = rng.randint(2, 16)
    a = rng.randint(0, COUNT_MAX + 1 - length)
    b = a + length - 1
    user = rng.choice(COUNT_TEMPLATES).format(a=a, b=b)
    return _chat("counting", user, ", ".join(str(i) for i in range(a, b + 1)), ("counting", a, b))


# --------------------------------------------------------------------------
# sequence: primes
# --------------------------------------------------------------------------

PRIMES: tuple[int, ...] = tuple(
    p for p in range(2, 80) if all(p % d for d in range(2, int(p**0.5) + 1))
)

PRIMES_BELOW: tuple[str, ...] = (
    "List the prime numbers below {n}.",
    "What are the prime numbers less than {n}?",
    "List all primes below {n}.",
    "Which numbers below {n} are prime?",
)
PRIMES_UP_TO: tuple[str, ...] = (
    "List all primes up to {n}.",
    "List the prime numbers up to and including {n}.",
    "What are the primes up to {n}?",
)
PRIMES_FIRST: tuple[str, ...] = (
    "List the first {n} prime numbers.",
    "What are the first {n} primes?",
    "Name the first {n} prime numbers.",
)


def sequence(rng: random.Random) -> Example:
    """Primes below N, up to N, or the first N primes, separated by ", "."""
    kind = rng.choice(("below", "up_to", "first"))
    if kind == "first":
        n = rng.randint(1, 18)
        primes = PRIMES[:n]
        user = rng.choice(PRIMES_FIRST).format(n=n)
    else:
        n = rng.randint(3, 72)
        primes = tuple(p for p in PRIMES if p < n or (kind == "up_to" and p == n))
        user = rng.choice(PRIMES_BELOW if kind == "below" else PRIMES_UP_TO).format(n=n)
    return _chat("sequence", user, ", ".join(str(p) for p in primes), ("primes", kind, n))


# --------------------------------------------------------------------------
# tool calls
# --------------------------------------------------------------------------


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CNY", "CHF", "CAD", "AUD")

TOOLS: dict[str, dict[str, Any]] = {
    "get_weather": _tool(
        "get_weather",
        "Get the current weather in a city.",
        {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        ["city"],
    ),
    "search_web": _tool(
        "search_web",
        "Search the web.",
        {"query": {"type": "string", "description": "Search query"}},
        ["query"],
    ),
    "convert_currency": _tool(
        "convert_currency",
        "Convert an amount between currencies.",
        {
            "amount": {"type": "number"},
            "from_currency": {"type": "string", "description": "ISO code"},
            "to_currency": {"type": "string", "description": "ISO code"},
        },
        ["amount", "from_currency", "to_currency"],
    ),
    "get_time": _tool(
        "get_time",
        "Get the current local time in a city.",
        {"city": {"type": "string", "description": "City name"}},
        ["city"],
    ),
}

CITIES = (
    "Paris London Berlin Madrid Rome Lisbon Vienna Prague Warsaw Dublin Oslo Stockholm "
    "Helsinki Athens Cairo Nairobi Lagos Tokyo Osaka Seoul Beijing Shanghai Delhi Mumbai "
    "Bangkok Jakarta Manila Sydney Melbourne Auckland Toronto Montreal Chicago Boston Denver "
    "Seattle Miami Lima Bogota Santiago"
).split() + ["New York", "Los Angeles", "San Francisco", "Mexico City", "Buenos Aires",
             "Cape Town", "Hong Kong", "Rio de Janeiro"]

# Search queries: a place-bound pattern with a city (so a query must be copied,
# not recalled) or a fixed topic.
QUERY_PATTERNS = (
    "cheap flights to {city}", "hotels in {city}", "museums in {city}", "things to do in {city}",
    "restaurants in {city}", "train tickets to {city}", "the history of {city}", "parks in {city}",
)
QUERY_TOPICS = (
    "best hiking trails in Norway", "how to bake sourdough bread", "latest news about electric cars",
    "how tall is Mount Everest", "easy pasta recipes", "how do solar panels work",
    "symptoms of the common cold", "how to tie a tie", "the rules of chess", "vegetarian dinner ideas",
    "how volcanoes form", "how to grow tomatoes", "the tallest building in the world",
    "jazz concerts this weekend", "how to change a bike tire", "beginner yoga poses",
    "how to make green tea", "facts about octopuses", "how to write a cover letter",
    "best sci-fi books", "how rainbows form", "the distance to the moon", "how to cook rice",
    "running shoes for beginners", "the history of jazz", "how bees make honey",
)


def _query(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(QUERY_PATTERNS).format(city=rng.choice(CITIES))
    return rng.choice(QUERY_TOPICS)


WEATHER_TEMPLATES: tuple[str, ...] = (
    "What is the weather in {city}?",
    "What's the weather like in {city}?",
    "How is the weather in {city} today?",
    "Check the weather for {city}.",
    "Tell me the weather in {city}.",
)
WEATHER_UNIT_TEMPLATES: tuple[str, ...] = (
    "What is the weather in {city} in {unit}?",
    "What's the weather like in {city}? Use {unit}.",
    "Tell me the temperature in {city} in {unit}.",
    "How warm is it in {city} in {unit}?",
    "Check the weather for {city} in {unit}.",
)
TIME_TEMPLATES: tuple[str, ...] = (
    "What time is it in {city}?",
    "Tell me the current time in {city}.",
    "What's the local time in {city}?",
    "Get the time in {city}.",
)
SEARCH_TEMPLATES: tuple[str, ...] = (
    "Search the web for {q}.",
    "Look up {q} online.",
    "Find information about {q}.",
    "Can you search for {q}?",
    "Search for {q}.",
)
CONVERT_TEMPLATES: tuple[str, ...] = (
    "Convert {amount} {src} to {dst}.",
    "How much is {amount} {src} in {dst}?",
    "Change {amount} {src} into {dst}.",
    "Convert {amount} {src} into {dst}, please.",
)


def _tool_request(rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    """(user message, tool name, arguments) for one random request."""
    name = rng.choice(("get_weather", "get_weather", "search_web", "convert_currency", "get_time"))
    if name == "get_weather":
        city = rng.choice(CITIES)
        if rng.random() < 0.6:
            unit = rng.choice(("celsius", "fahrenheit"))
            return rng.choice(WEATHER_UNIT_TEMPLATES).format(city=city, unit=unit), name, {
                "city": city,
                "unit": unit,
            }
        return rng.choice(WEATHER_TEMPLATES).format(city=city), name, {"city": city}
    if name == "get_time":
        city = rng.choice(CITIES)
        return rng.choice(TIME_TEMPLATES).format(city=city), name, {"city": city}
    if name == "search_web":
        q = _query(rng)
        return rng.choice(SEARCH_TEMPLATES).format(q=q), name, {"query": q}
    amount = rng.choice((rng.randint(1, 99), rng.randint(1, 20) * 50, rng.randint(100, 9999)))
    src, dst = rng.sample(CURRENCIES, 2)
    user = rng.choice(CONVERT_TEMPLATES).format(amount=amount, src=src, dst=dst)
    return user, name, {"amount": amount, "from_currency": src, "to_currency": dst}


def tool_call(rng: random.Random) -> Example:
    """A request answered by one hermes-style tool call; 1-2 tools offered."""
    user, name, arguments = _tool_request(rng)
    others = [t for t in TOOLS if t != name]
    offered = [name, *rng.sample(others, rng.randint(0, 1))]
    rng.shuffle(offered)
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return Example(
        "tool_call",
        [
            {"role": "user", "content": user},
            {"role": "assistant", "content": None, "tool_calls": [call]},
        ],
        tools=[TOOLS[t] for t in offered],
        values=("tool_call", name, json.dumps(arguments)),
    )


# --------------------------------------------------------------------------
# prose
# --------------------------------------------------------------------------

# topic -> three sentences; an answer is the first two or all three.
PROSE_EN: dict[str, tuple[str, str, str]] = {
    "the ocean": (
        "The ocean covers most of the surface of our planet.",
        "Its waves carry salt, light and countless living things.",
        "Sailors have crossed it for thousands of years.",
    ),
    "mountains": (
        "Mountains rise slowly over millions of years.",
        "Their high slopes are cold, windy and often covered in snow.",
        "Many rivers begin as small streams near their peaks.",
    ),
    "rain": (
        "Rain falls when tiny drops in a cloud join together.",
        "It fills rivers, lakes and the soil that plants need.",
        "After a storm the air often smells fresh and clean.",
    ),
    "coffee": (
        "Coffee is made from the roasted seeds of a small tree.",
        "Many people drink a warm cup of it every morning.",
        "Its rich smell can fill a whole kitchen.",
    ),
    "libraries": (
        "A library is a quiet place full of books to borrow.",
        "Anyone can go there to read, study or ask for help.",
        "Some libraries are hundreds of years old.",
    ),
    "gardens": (
        "A garden is a small piece of land where plants are grown.",
        "It needs sunlight, water and patient care.",
        "In spring it fills with flowers and busy bees.",
    ),
    "bicycles": (
        "A bicycle has two wheels and is moved by pushing the pedals.",
        "It is a cheap and quiet way to travel in a city.",
        "Riding one is also good exercise for the heart.",
    ),
    "the moon": (
        "The moon travels around the earth about once a month.",
        "It shines at night by reflecting light from the sun.",
        "Its pull on the sea causes the tides.",
    ),
    "winter": (
        "Winter is the coldest season of the year.",
        "The days are short and the nights are long.",
        "In many places the ground is covered with snow.",
    ),
    "cats": (
        "Cats are small animals that many people keep as pets.",
        "They sleep for much of the day and hunt at night.",
        "A happy cat often purrs softly.",
    ),
    "trains": (
        "Trains carry people and goods along steel rails.",
        "A fast train can cross a country in a few hours.",
        "Many cities have a busy central station.",
    ),
    "bread": (
        "Bread is made from flour, water, salt and yeast.",
        "The dough rises before it is baked in a hot oven.",
        "Fresh bread has a soft inside and a crisp crust.",
    ),
}

PROSE_EN_TEMPLATES: tuple[tuple[str, int], ...] = (
    ("Write two sentences about {t}.", 2),
    ("Write three sentences about {t}.", 3),
    ("Tell me a little about {t}.", 2),
    ("Describe {t} in a few sentences.", 3),
    ("Write a short paragraph about {t}.", 3),
    ("Say something about {t}.", 2),
    ("Give me two sentences on {t}.", 2),
)

PROSE_ZH: dict[str, tuple[str, str, str]] = {
    "大海": ("大海覆盖了地球表面的大部分。", "海浪里有盐、阳光和无数的生命。", "几千年来，水手们一直在大海上航行。"),
    "高山": ("高山是在几百万年里慢慢升起来的。", "山顶又冷又多风，常常盖着白雪。", "许多河流发源于山顶附近的小溪。"),
    "雨": ("云里的小水滴聚在一起，就变成了雨。", "雨水流进河流、湖泊和土地。", "雨后的空气常常清新干净。"),
    "茶": ("茶是用茶树的叶子做成的。", "很多人喜欢在下午喝一杯热茶。", "好茶的香气可以留很久。"),
    "图书馆": ("图书馆是一个安静的地方，里面有很多书。", "每个人都可以去那里读书和学习。", "有些图书馆已经有几百年的历史。"),
    "花园": ("花园是种植花草的一小块土地。", "它需要阳光、水和耐心的照顾。", "春天的花园开满了鲜花。"),
    "自行车": ("自行车有两个轮子，靠脚踩踏板前进。", "在城市里骑车又便宜又安静。", "骑自行车也是很好的锻炼。"),
    "月亮": ("月亮大约每个月绕地球转一圈。", "它在夜里反射太阳的光。", "月亮的引力带来了海水的潮汐。"),
    "冬天": ("冬天是一年中最冷的季节。", "白天很短，夜晚很长。", "很多地方的地上盖满了雪。"),
    "猫": ("猫是很多人喜欢养的小动物。", "它们白天常常睡觉，晚上出去捕猎。", "开心的猫会轻轻地打呼噜。"),
    "火车": ("火车沿着铁轨运送旅客和货物。", "快速的火车几个小时就能穿过一个国家。", "很多城市都有繁忙的火车站。"),
    "面包": ("面包是用面粉、水、盐和酵母做成的。", "面团发酵以后放进热烤箱里烤。", "新鲜的面包里面松软，外皮香脆。"),
}

PROSE_ZH_TEMPLATES: tuple[tuple[str, int], ...] = (
    ("请用两句话介绍一下{t}。", 2),
    ("请写三句关于{t}的话。", 3),
    ("简单介绍一下{t}。", 2),
    ("写一段关于{t}的短文。", 3),
    ("谈谈{t}。", 2),
    ("用几句话描述{t}。", 3),
)


def prose_en(rng: random.Random) -> Example:
    """Two or three fixed sentences on a topic, asked in varied wordings."""
    topic = rng.choice(sorted(PROSE_EN))
    template, n = rng.choice(PROSE_EN_TEMPLATES)
    answer = " ".join(PROSE_EN[topic][:n])
    return _chat("prose_en", template.format(t=topic), answer, ("prose_en", topic, n))


def prose_zh(rng: random.Random) -> Example:
    """Chinese prose: two or three fixed sentences on a topic."""
    topic = rng.choice(sorted(PROSE_ZH))
    template, n = rng.choice(PROSE_ZH_TEMPLATES)
    answer = "".join(PROSE_ZH[topic][:n])
    return _chat("prose_zh", template.format(t=topic), answer, ("prose_zh", topic, n))


GENERATORS: dict[str, Callable[[random.Random], Example]] = {
    "recitation": recitation,
    "counting": counting,
    "sequence": sequence,
    "tool_call": tool_call,
    "prose_en": prose_en,
    "prose_zh": prose_zh,
}


def is_held_out(ex: Example) -> bool:
    """True if the example coincides with a default probe (and must be dropped)."""
    return ex.user_text in HELD_OUT_PROMPTS or ex.values in HELD_OUT_VALUES


def _category_examples(category: str, seed: int) -> Iterator[Example]:
    rng = random.Random(f"{seed}:{category}")
    gen = GENERATORS[category]
    for _ in range(COUNTS[category]):
        ex = gen(rng)
        if not is_held_out(ex):
            yield ex


def generate(seed: int = SEED) -> list[Example]:
    """The whole corpus, deterministic in `seed`, shuffled, probes held out."""
    examples = [ex for cat in COUNTS for ex in _category_examples(cat, seed)]
    random.Random(seed).shuffle(examples)
    return examples


def check_held_out(probes: list[Any], examples: list[Example]) -> list[str]:
    """Problems: chat probes (`observatory.model.probes.Probe`) whose user message
    occurs in `examples` or is missing from `HELD_OUT_PROMPTS`."""
    prompts = {ex.user_text for ex in examples}
    problems = []
    for p in probes:
        user = [m["content"] for m in p.messages or [] if m["role"] == "user"]
        if user and user[-1] in prompts:
            problems.append(f"{p.name}: prompt {user[-1]!r} is in the corpus")
        if user and user[-1] not in HELD_OUT_PROMPTS:
            problems.append(f"{p.name}: prompt {user[-1]!r} is not in HELD_OUT_PROMPTS")
    return problems
