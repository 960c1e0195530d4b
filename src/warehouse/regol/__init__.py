"""Regol (DESIGN §5.8): re-run watched jobs at each commit of their function's
branch, keep the history, chart it, and bisect to the commit that changed a
result.

``model`` decides (pure: which commits to run, what changed, the bisect's
next step, whether an idle controller may start runs); ``git`` reads
repositories; ``records`` keeps watches and runs in the catalog; ``service``
puts them together over a warehouse that submits jobs; ``client`` is the
same operations embedded or through a controller; ``auto`` is the
controller's idle runner; ``chart`` lays out the history as SVG.
"""

from warehouse.regol.model import REGOL_PRIORITY, Bisect, Commit, Outcome, bisect_step, changes
from warehouse.regol.values import BisectRecord, RunRecord, WatchRecord

__all__ = [
    "REGOL_PRIORITY",
    "Bisect",
    "BisectRecord",
    "Commit",
    "Outcome",
    "RunRecord",
    "WatchRecord",
    "bisect_step",
    "changes",
]
