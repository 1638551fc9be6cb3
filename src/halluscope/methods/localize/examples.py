"""FINAL few-shot worked examples (used by the few-shot prompts, and known to the reply parser so that a reply
copying them is not taken for an answer)."""

from __future__ import annotations

# Worked examples written for halluscope (invented texts; not taken from any benchmark).
FEW_SHOT_EXAMPLES: tuple[tuple[str, str, list[str]], ...] = (
    (
        "The Riverside library will close for renovation from 3 March until the end of May, the city council said "
        "on Monday. Books borrowed before the closure can be returned at the Hillgate branch. The work, costing "
        "2.4m pounds, will add a children's wing and a cafe. Council leader Maria Okafor said the project had been "
        "delayed twice because of funding problems.",
        "Riverside library will close for six months from March while a 4m-pound children's wing is built, the "
        "mayor has announced.",
        [
            'The text says the closure lasts "six months", but the source says it runs from 3 March until the end '
            "of May.",
            'The text gives the cost as "4m-pound", but the source says the work costs 2.4m pounds.',
            'The text says "the mayor has announced" the closure, but the source says the city council announced it '
            "and mentions no mayor.",
        ],
    ),
    (
        "Firefighters rescued two hikers who had been stranded overnight on Ben Carrow after fog rolled in on "
        "Saturday afternoon. The pair, both in their 60s, were found cold but unhurt at about 07:00 on Sunday. A "
        "mountain rescue spokesperson urged walkers to check the forecast before setting out.",
        "Two hikers stranded overnight on a mountain in fog have been rescued unhurt.",
        [],
    ),
    (
        "Shares in the electric carmaker Voltra rose 8% on Thursday after it reported its first quarterly profit. "
        "The Lyon-based company said deliveries grew by a third compared with the same quarter last year. Chief "
        "executive Tom Reyes said the firm would open a second factory in 2026.",
        "Lyon-based carmaker Voltra has reported its first annual profit, sending its shares up 8%, and plans to "
        "build two new factories.",
        [
            'The text calls the profit "annual", but the source says it was the company\'s first quarterly profit.',
            'The text says Voltra plans "two new factories", but the source mentions a single second factory.',
        ],
    ),
)
