"""The options models' old import path: they live in :mod:`halluscope.options` (below the stage registry, which
validates every stage's options with them); importable here as before, for methods and plugins written against
this path."""

from halluscope.options import MAX_BATCH_SIZE as MAX_BATCH_SIZE
from halluscope.options import MAX_TOP_K as MAX_TOP_K
from halluscope.options import MAX_WINDOW as MAX_WINDOW
from halluscope.options import ClaimOptions as ClaimOptions
from halluscope.options import MethodOptions as MethodOptions
from halluscope.options import OptionsError as OptionsError
from halluscope.options import RetrievalMode as RetrievalMode
from halluscope.options import RetrievalOptions as RetrievalOptions
from halluscope.options import ScoreKind as ScoreKind
from halluscope.options import StageOptions as StageOptions
from halluscope.options import VerdictOrder as VerdictOrder
from halluscope.options import options_view as options_view
from halluscope.options import own_options as own_options
