"""Twenty extraction tasks (four schemas, five documents each) for the jump-forward benchmark.

Each schema lists its required properties first and its optional ones last, so every grammar
that keeps schema order (radixlm's default, llama.cpp's, xgrammar's, llguidance's) writes the
members in one order. The documents are written for this benchmark (no outside source).
``benchmarks/record_extraction.py`` records a real model's answers to them in
``benchmarks/data/extraction_outputs.json``; ``bench_jump_forward.py`` replays those answers.
"""

from __future__ import annotations

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "company": {"type": "string"},
        "role": {"type": "string"},
        "city": {"type": "string"},
        "years_experience": {"type": "integer", "minimum": 0, "maximum": 80},
        "seniority": {"enum": ["junior", "mid", "senior", "lead"]},
        "skills": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "email": {"type": "string"},
    },
    "required": ["name", "company", "role", "city", "years_experience", "seniority", "skills"],
    "additionalProperties": False,
}

EVENT = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "date": {"type": "string", "format": "date"},
        "venue": {"type": "string"},
        "city": {"type": "string"},
        "category": {"enum": ["conference", "concert", "meetup", "sports", "exhibition"]},
        "ticket_price_eur": {"type": "number", "minimum": 0},
        "sold_out": {"type": "boolean"},
        "speakers": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    },
    "required": ["title", "date", "venue", "city", "category", "ticket_price_eur", "sold_out"],
    "additionalProperties": False,
}

PRODUCT = {
    "type": "object",
    "properties": {
        "product_name": {"type": "string"},
        "brand": {"type": "string"},
        "price": {"type": "number", "minimum": 0},
        "currency": {"enum": ["EUR", "USD", "GBP", "JPY"]},
        "in_stock": {"type": "boolean"},
        "rating": {"type": "number", "minimum": 0, "maximum": 5},
        "dimensions_cm": {
            "type": "object",
            "properties": {"width": {"type": "number"}, "height": {"type": "number"},
                           "depth": {"type": "number"}},
            "required": ["width", "height", "depth"],
            "additionalProperties": False,
        },
        "warranty_years": {"type": "integer", "minimum": 0},
    },
    "required": ["product_name", "brand", "price", "currency", "in_stock", "rating", "dimensions_cm"],
    "additionalProperties": False,
}

INVOICE = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string"},
        "issue_date": {"type": "string", "format": "date"},
        "seller": {"type": "string"},
        "buyer": {"type": "string"},
        "line_items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"description": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1},
                               "unit_price": {"type": "number", "minimum": 0}},
                "required": ["description", "quantity", "unit_price"],
                "additionalProperties": False,
            },
            "minItems": 1,
            "maxItems": 5,
        },
        "total": {"type": "number", "minimum": 0},
        "paid": {"type": "boolean"},
        "notes": {"type": "string"},
    },
    "required": ["invoice_number", "issue_date", "seller", "buyer", "line_items", "total", "paid"],
    "additionalProperties": False,
}

SCHEMAS = {"person": PERSON, "event": EVENT, "product": PRODUCT, "invoice": INVOICE}

DOCUMENTS: list[tuple[str, str]] = [
    ("person", "Maria Lopez joined Northwind Analytics in Madrid as a data engineer. She has spent nine "
               "years building pipelines in Python, Spark and SQL, and now mentors two junior colleagues. "
               "Reach her at maria.lopez@northwind.example."),
    ("person", "After twelve years at Contoso Health, Tom Becker became lead platform architect in Berlin. "
               "He is known for his work on Kubernetes, Go and incident response."),
    ("person", "Aiko Tanaka is a mid-level frontend developer at Fabrikam in Osaka with four years of "
               "experience in TypeScript, React and accessibility testing."),
    ("person", "Fresh out of university, Liam O'Connor started as a junior support engineer at Tailspin "
               "Toys in Dublin last spring; he knows Linux and Bash and has one year of experience."),
    ("person", "Priya Raman, senior security analyst at Woodgrove Bank in Toronto, has 15 years in threat "
               "hunting, forensics and cloud security. Email: priya.raman@woodgrove.example."),
    ("event", "PyData Lisbon 2025 takes place on 2025-10-14 at the LX Factory in Lisbon. Tickets are "
              "120 euros and still available. Speakers include Ana Silva and Jonas Berg."),
    ("event", "The Rolling Pebbles play the Olympia in Paris on 2025-06-03. The concert is sold out; "
              "tickets had cost 65 euros."),
    ("event", "A free Rust meetup is held at the Impact Hub in Vienna on 2025-03-20, with talks by "
              "Lena Huber and Marco Rossi."),
    ("event", "The Modern Light photography exhibition opens at the Kunsthal in Rotterdam on 2025-09-01. "
              "Entry costs 14.50 euros and tickets remain available."),
    ("event", "The city derby between FC Norden and SV Hafen is played at the Nordstadion in Hamburg on "
              "2025-11-08. All 40,000 seats are sold; the cheapest ticket was 35 euros."),
    ("product", "The Acme AirDesk standing desk costs 499 US dollars and is in stock. It measures 140 cm "
                "wide, 120 cm high and 70 cm deep, carries a 5-year warranty, and buyers rate it 4.6 out of 5."),
    ("product", "Globex Kettle Pro, an electric kettle by Globex, sells for 39.99 euros. Currently out of "
                "stock. Size: 22 x 25 x 16 cm. Average rating 4.2."),
    ("product", "The Initech Monitor Arm is priced at 89 pounds and ships today. Rated 3.9 stars. It is "
                "12 cm wide, 45 cm high and 10 cm deep, with a two-year warranty."),
    ("product", "Umbrella Corp's trail backpack, the Hiker 30, costs 12,800 yen and is in stock. It is 30 "
                "cm wide, 52 cm tall and 20 cm deep; reviewers give it 4.8."),
    ("product", "Stark Audio's NoiseOff headphones are listed at 249 US dollars but sold out. Dimensions "
                "18 by 20 by 8 cm, rating 4.4, warranty one year."),
    ("invoice", "Invoice INV-2025-0042, issued 2025-02-11 by Blue Yonder Ltd to Alpine Ski House: 3 "
                "consulting days at 950 each and one travel flat fee of 300. Total 3150. Paid in full."),
    ("invoice", "Invoice 7781 dated 2025-04-02 from Coho Winery to Wingtip Toys lists 12 bottles of "
                "Merlot at 18.50 and 6 bottles of Riesling at 14.00, total 306.00, not yet paid."),
    ("invoice", "Litware Inc billed Proseware on 2025-01-30 (invoice LW-118) for 40 software licences at "
                "25 each. Total due 1000; payment outstanding. Note: net 30 days."),
    ("invoice", "On 2025-05-15 Fourth Coffee issued invoice FC-9 to Lucerne Publishing for 10 kg of "
                "espresso beans at 22 per kg and 2 grinders at 150. Total 520, paid."),
    ("invoice", "Invoice A-55 (2025-07-07): Adventure Works sold Relecloud 1 server rack at 2,400, 4 "
                "power units at 180 and 2 switches at 610, total 4340. The invoice has been paid."),
]

PROMPT = ("Extract these fields from the text as JSON: {fields}. Use only facts from the text.\n\n"
          "Text: {document}")

# The facts each document states (its required fields; strings compared case-insensitively, lists as
# sets of lower-cased strings, numbers by value). Written with the documents, for field accuracy.
TRUTH: list[dict] = [
    {"name": "Maria Lopez", "company": "Northwind Analytics", "role": "data engineer", "city": "Madrid",
     "years_experience": 9, "skills": ["Python", "Spark", "SQL"]},
    {"name": "Tom Becker", "company": "Contoso Health", "role": "lead platform architect", "city": "Berlin",
     "years_experience": 12, "seniority": "lead", "skills": ["Kubernetes", "Go", "incident response"]},
    {"name": "Aiko Tanaka", "company": "Fabrikam", "role": "frontend developer", "city": "Osaka",
     "years_experience": 4, "seniority": "mid", "skills": ["TypeScript", "React", "accessibility testing"]},
    {"name": "Liam O'Connor", "company": "Tailspin Toys", "role": "junior support engineer", "city": "Dublin",
     "years_experience": 1, "seniority": "junior", "skills": ["Linux", "Bash"]},
    {"name": "Priya Raman", "company": "Woodgrove Bank", "role": "senior security analyst", "city": "Toronto",
     "years_experience": 15, "seniority": "senior", "skills": ["threat hunting", "forensics", "cloud security"]},
    {"title": "PyData Lisbon 2025", "date": "2025-10-14", "venue": "LX Factory", "city": "Lisbon",
     "category": "conference", "ticket_price_eur": 120, "sold_out": False},
    {"title": "The Rolling Pebbles", "date": "2025-06-03", "venue": "Olympia", "city": "Paris",
     "category": "concert", "ticket_price_eur": 65, "sold_out": True},
    {"date": "2025-03-20", "venue": "Impact Hub", "city": "Vienna", "category": "meetup",
     "ticket_price_eur": 0, "sold_out": False},
    {"title": "Modern Light", "date": "2025-09-01", "venue": "Kunsthal", "city": "Rotterdam",
     "category": "exhibition", "ticket_price_eur": 14.5, "sold_out": False},
    {"date": "2025-11-08", "venue": "Nordstadion", "city": "Hamburg", "category": "sports",
     "ticket_price_eur": 35, "sold_out": True},
    {"product_name": "Acme AirDesk", "brand": "Acme", "price": 499, "currency": "USD", "in_stock": True,
     "rating": 4.6, "dimensions_cm": {"width": 140, "height": 120, "depth": 70}},
    {"product_name": "Globex Kettle Pro", "brand": "Globex", "price": 39.99, "currency": "EUR",
     "in_stock": False, "rating": 4.2, "dimensions_cm": {"width": 22, "height": 25, "depth": 16}},
    {"product_name": "Initech Monitor Arm", "brand": "Initech", "price": 89, "currency": "GBP", "in_stock": True,
     "rating": 3.9, "dimensions_cm": {"width": 12, "height": 45, "depth": 10}},
    {"product_name": "Hiker 30", "brand": "Umbrella Corp", "price": 12800, "currency": "JPY", "in_stock": True,
     "rating": 4.8, "dimensions_cm": {"width": 30, "height": 52, "depth": 20}},
    {"product_name": "NoiseOff", "brand": "Stark Audio", "price": 249, "currency": "USD", "in_stock": False,
     "rating": 4.4, "dimensions_cm": {"width": 18, "height": 20, "depth": 8}},
    {"invoice_number": "INV-2025-0042", "issue_date": "2025-02-11", "seller": "Blue Yonder Ltd",
     "buyer": "Alpine Ski House", "total": 3150, "paid": True},
    {"invoice_number": "7781", "issue_date": "2025-04-02", "seller": "Coho Winery", "buyer": "Wingtip Toys",
     "total": 306, "paid": False},
    {"invoice_number": "LW-118", "issue_date": "2025-01-30", "seller": "Litware Inc", "buyer": "Proseware",
     "total": 1000, "paid": False},
    {"invoice_number": "FC-9", "issue_date": "2025-05-15", "seller": "Fourth Coffee",
     "buyer": "Lucerne Publishing", "total": 520, "paid": True},
    {"invoice_number": "A-55", "issue_date": "2025-07-07", "seller": "Adventure Works", "buyer": "Relecloud",
     "total": 4340, "paid": True},
]


def field_score(value: object, truth: dict) -> tuple[int, int]:
    """``(right, asked)``: how many of ``truth``'s fields ``value`` (a parsed answer) has right."""
    if not isinstance(value, dict):
        return 0, len(truth)
    right = sum(_same(value.get(key), want) for key, want in truth.items())
    return right, len(truth)


def _same(got: object, want: object) -> bool:
    if isinstance(want, bool) or want is None:
        return got is want
    if isinstance(want, (int, float)):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and abs(got - want) < 1e-6
    if isinstance(want, str):
        return isinstance(got, str) and got.strip().lower() == want.lower()
    if isinstance(want, list):
        return isinstance(got, list) and {str(g).strip().lower() for g in got} == {w.lower() for w in want}
    if isinstance(want, dict):
        return isinstance(got, dict) and all(_same(got.get(k), w) for k, w in want.items())
    return False
