"""Text utilities: sentence segmentation with offsets, span location, defensive parsing of replies."""

from halluscope.text.fence import fence, fence_key
from halluscope.text.parsing import ParseError, extract_json, parse_items_after_marker
from halluscope.text.sentences import Sentence, split_sentences
from halluscope.text.spans import Match, locate

__all__ = [
    "Match",
    "ParseError",
    "fence",
    "fence_key",
    "Sentence",
    "extract_json",
    "locate",
    "parse_items_after_marker",
    "split_sentences",
]
