"""What a running activity says it is doing (activities/heartbeats.say_doing),
told once per change while following: e.g. which search engine web_search
asks, so a long call is never a silent progress counter. The line comes from
the server's view of the run (its pending activities' last heartbeat), so it
works wherever the worker runs."""

from __future__ import annotations

from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse
from temporalio.converter import DataConverter

NOTICE_CHARACTERS = 200
"""Of the line an activity heartbeats, shown (it cuts to the same length)."""


async def doing_lines(description: DescribeWorkflowExecutionResponse, converter: DataConverter) -> dict[str, str]:
    """Activity id -> the line its last heartbeat carried, for each pending
    activity whose heartbeat carried one line of text."""
    lines: dict[str, str] = {}
    for pending in description.pending_activities:
        payloads = list(pending.heartbeat_details.payloads)
        if not payloads:
            continue
        try:
            value = (await converter.decode(payloads[:1]))[0]
        except Exception:  # noqa: BLE001 (details of another kind, or a key this starter lacks)
            continue
        if isinstance(value, str) and value.strip():
            lines[pending.activity_id] = " ".join(value.split())[:NOTICE_CHARACTERS]
    return lines


class DoingNotices:
    """Says each new line of each of a run's activities once."""

    def __init__(self) -> None:
        self.told: dict[tuple[str, str], str] = {}
        """(run id, activity id) -> the line last told."""

    async def lines(
        self, run_id: str, description: DescribeWorkflowExecutionResponse, converter: DataConverter
    ) -> list[str]:
        new = []
        for activity_id, line in (await doing_lines(description, converter)).items():
            if self.told.get((run_id, activity_id)) != line:
                self.told[(run_id, activity_id)] = line
                new.append(line)
        return new
