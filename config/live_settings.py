"""`[live]`: the thoughts a think streams beside the run's history (docs/runs.md, "Live thoughts").

    [live]
    stream = true   # the worker asks the model to stream and writes what arrives to the live journal
    print = true    # the starter shows the streamed thought on a terminal while it follows a run

Neither is part of a run's input: `stream` is the worker's, `print` the starter's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, StrictBool


class LiveSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stream: StrictBool = True
    """The worker's thinks call the model with stream=True and write the
    tokens to `<workspace root>/.live/` as they arrive; false: one plain call
    per think, and no journal."""
    print: StrictBool = True
    """The starter follows the journal of the run it follows, when the
    workspace root is on its machine, and shows the thought on a terminal."""
