"""Text utilities: sentence segmentation with offsets, span location, defensive parsing of replies."""

from halluscope.text.parsing import ParseError, extract_json, parse_items_after_marker
from halluscope.text.sentences import Sentence, split_sentences
from halluscope.text.spans import Match, locate

__all__ = [
    "Match", "ParseError", "Sentence", "extract_json", "locate", "parse_items_after_marker", "split_sentences",
]
