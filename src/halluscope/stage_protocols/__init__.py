"""The stage protocols' old import path: they live in :mod:`halluscope.stages.protocols` (and are importable from
:mod:`halluscope.stages`); importable here as before, for plugins written against this path."""

from halluscope.stages.protocols import PROTOCOLS as PROTOCOLS
from halluscope.stages.protocols import Aggregate as Aggregate
from halluscope.stages.protocols import Aggregator as Aggregator
from halluscope.stages.protocols import Context as Context
from halluscope.stages.protocols import ContextSelector as ContextSelector
from halluscope.stages.protocols import Decomposer as Decomposer
from halluscope.stages.protocols import Deduplicator as Deduplicator
from halluscope.stages.protocols import EventOrder as EventOrder
from halluscope.stages.protocols import EvidenceFinder as EvidenceFinder
from halluscope.stages.protocols import Gate as Gate
from halluscope.stages.protocols import GateDecision as GateDecision
from halluscope.stages.protocols import GateOutcome as GateOutcome
from halluscope.stages.protocols import Localizer as Localizer
from halluscope.stages.protocols import PipelineRun as PipelineRun
from halluscope.stages.protocols import PromptResolver as PromptResolver
from halluscope.stages.protocols import ProtocolName as ProtocolName
from halluscope.stages.protocols import Selection as Selection
from halluscope.stages.protocols import Sorter as Sorter
from halluscope.stages.protocols import Verifier as Verifier
from halluscope.stages.protocols import same_prompt as same_prompt
