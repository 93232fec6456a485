#!/usr/bin/env python3
"""Regenerate tests/fixtures/memory_questions.json: the labelled set that
fusion's weights were chosen on (tests/e2e/fusion.rs, README "How fusion
ranks").

Five topics of a logistics company (depots, customers, staff, software,
fleet), five kinds of fact per topic, each told of eight different depots,
customers, people, systems or trucks: 200 memories. Sixty questions, twelve
per topic, each asking for one memory in other words: a question shares
with its memory the name it is about and little else, and that name is in
four other memories (its other facts) while the same kind of fact is told
of seven other names. So neither leg is enough alone: words find the name,
meaning finds the kind of fact.

    python3 scripts/gen-memory-questions.py
"""

import json
import pathlib

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "memory_questions.json"

PEOPLE = ["Anna Kowalski", "Carlos Mendes", "Priya Nair", "Tom Becker",
          "Sofia Rossi", "Liam O'Brien", "Yuki Tanaka", "Omar Haddad"]
CITIES = ["Leeds", "Lyon", "Gdansk", "Porto", "Utrecht", "Bilbao", "Graz", "Aarhus"]
MONTHS = ["January", "March", "April", "June", "August", "September", "October", "November"]
LANGS = ["Polish", "Portuguese", "Hindi", "German", "Italian", "Irish", "Japanese", "Arabic"]
FOODS = ["peanuts", "shellfish", "gluten", "dairy", "eggs", "sesame", "soy", "celery"]
SHIFTS = ["the night shift, Sunday to Thursday", "early mornings, six to two",
          "weekends only", "the late shift, two until ten", "four long days, Monday to Thursday",
          "the night shift, Tuesday to Saturday", "mornings, part time", "rotating twelve-hour shifts"]
TIMES = ["05:30", "06:00", "06:30", "07:00", "05:00", "04:45", "06:15", "07:30"]
ORDINAL = ["first", "second", "third", "last", "first", "second", "third", "last"]

TOPICS = {
    "depots": (CITIES, [
        ("The {e} depot opens its gates to lorries at {time} on weekdays.",
         "What time can drivers first get into the {e} yard in the morning?"),
        ("At the {e} depot the forklift keys hang in a locked cabinet beside the canteen; {person} keeps the spare.",
         "Where are the keys for the lifting machines kept in {e}?"),
        ("The {e} depot has {n} loading docks, and dock {d} is reserved for refrigerated goods.",
         "Which bay in {e} is set aside for chilled cargo?"),
        ("Visitors to the {e} depot sign in at reception and must wear a high-visibility vest.",
         "What do guests have to do on arrival at {e}?"),
        ("The {e} depot holds its fire drill on the {ordinal} Thursday of every quarter.",
         "How often does {e} practise evacuating the building?"),
    ]),
    "customers": (["Halvorsen Foods", "Brightwater Pharma", "Kestrel Outdoor", "Mirabel Textiles",
                   "Orchard Lane Bakeries", "Tidewater Marine", "Vantor Electronics", "Quillfield"], [
        ("{e} pays our invoices {n} days after the end of the month.",
         "How long does {e} take to settle a bill?"),
        ("{e} wants delivery notices by email and never by phone.",
         "How should we let {e} know a shipment is coming?"),
        ("Refunds for {e} above {amount} euros need sign-off from {person}.",
         "Who has to approve a big money-back request from {e}?"),
        ("{e} complained twice last year about damaged pallets on arrival.",
         "Has {e} had trouble with broken goods before?"),
        ("The {e} account is managed by {person} from the {city} office.",
         "Who is our main contact for the {e} relationship?"),
    ]),
    "staff": (PEOPLE, [
        ("{e} is on parental leave until {month}.",
         "When will {e} be back from time off with the baby?"),
        ("{e} holds a forklift licence that expires in {year}.",
         "Until when is {e} certified to drive a lift truck?"),
        ("{e} speaks {lang} fluently and can translate for customers.",
         "Which language can {e} interpret?"),
        ("{e} is allergic to {food}, so keep it out of team lunches.",
         "What food must {e} avoid?"),
        ("{e} works {shift}.",
         "What hours is {e} usually on duty?"),
    ]),
    "software": (["Ledgerline", "RouteMaster", "Docktrack", "PayFlow",
                  "StockPilot", "MailRelay", "FleetView", "TimeClock"], [
        ("{e} is backed up every night at {time} to the {city} data centre.",
         "When are copies of the {e} data taken?"),
        ("{e} is owned by {person}; report outages to them first.",
         "Whom should I ring if {e} goes down?"),
        ("Passwords for {e} must be changed every {n} days.",
         "How often do {e} logins need new credentials?"),
        ("{e} was unavailable for {n} hours in {month} after a failed upgrade.",
         "When did {e} last have a long outage?"),
        ("{e} licences are renewed each {month} for {amount} euros.",
         "How much does the {e} subscription cost us per year?"),
    ]),
    "fleet": (["KT-418", "MB-227", "RZ-903", "DL-550", "PF-114", "GN-762", "SW-381", "HC-649"], [
        ("Truck {e} is due for its annual inspection in {month}.",
         "When does {e} need its yearly roadworthiness check?"),
        ("Truck {e} usually runs the {city} to {city2} route.",
         "Where does {e} normally drive?"),
        ("Truck {e} has a tail lift rated for {n} kilograms.",
         "How heavy a load can the lifting platform on {e} handle?"),
        ("Truck {e} had a minor accident in {month} and its rear bumper was replaced.",
         "Has {e} ever been damaged in a collision?"),
        ("Truck {e} burns about {n} litres of diesel per hundred kilometres.",
         "What is the fuel consumption of {e}?"),
    ]),
}

SLOTS_N = {  # per (topic, template): the number told of entity j
    ("depots", 2): lambda j: 6 + j,
    ("customers", 0): lambda j: [30, 45, 60, 14, 21, 90, 30, 45][j],
    ("software", 2): lambda j: [30, 60, 90, 45, 30, 60, 90, 120][j],
    ("software", 3): lambda j: 2 + j,
    ("fleet", 2): lambda j: 500 + 250 * (j % 4),
    ("fleet", 4): lambda j: 24 + j,
}


def fill(topic, t, text, names, j):
    n = SLOTS_N.get((topic, t), lambda j: 10 + j)(j)
    return text.format(
        e=names[j], time=TIMES[j], person=PEOPLE[(j + 3 + t) % 8], n=n, d=1 + j % 3,
        ordinal=ORDINAL[j], amount=500 * (1 + j), city=CITIES[(j + 2) % 8],
        city2=CITIES[(j + 5) % 8], month=MONTHS[(j + t) % 8], year=2026 + j % 4,
        lang=LANGS[j], food=FOODS[j], shift=SHIFTS[j])


memories, questions, index = [], [], {}
for topic, (names, templates) in TOPICS.items():
    for t, (memory, _) in enumerate(templates):
        for j in range(len(names)):
            index[(topic, t, j)] = len(memories)
            memories.append(fill(topic, t, memory, names, j))
for topic, (names, templates) in TOPICS.items():
    for q in range(12):
        t, j = q % 5, (7 * q) % 8
        questions.append({"question": fill(topic, t, templates[t][1], names, j),
                          "memory": index[(topic, t, j)], "topic": topic})
assert len(set(memories)) == len(memories) == 200
assert len({q["memory"] for q in questions}) == len(questions) == 60

OUT.write_text(json.dumps({
    "about": "Labelled memory-search set (scripts/gen-memory-questions.py): each question asks, in "
             "other words, for the memory at index `memory`; the other memories are distractors.",
    "memories": memories,
    "questions": questions,
}, indent=1, ensure_ascii=False) + "\n")
print(f"{len(memories)} memories, {len(questions)} questions -> {OUT}")
