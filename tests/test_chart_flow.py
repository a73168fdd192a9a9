"""A PlanningFlow with the data analyst, as OpenManus's `[runflow]
use_data_analysis_agent = true` asks for it: started by starter.py (in this
process) on the dev server, run by a worker whose tools are in the real
bubblewrap sandbox, the LLM a fake that scripts the calls. The manus step
saves a CSV in the flow's shared workspace; the data_analysis step totals it
with pandas (python_execute), finds its variables still there in the next
call (the analyst's Python is a session), and charts the totals (the chart
tool)."""

from __future__ import annotations

import uuid
from collections import defaultdict

from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from agent_model.workspace_names import workspace_name_for
from runtime.worker_factory import build_worker
from testkit.cli import cli_environment
from testkit.e2e import child_env, server_address
from testkit.fake_openai import Reply, call, terminate
from testkit.settings import make_settings, write_config
from tests.test_planning_flow import FlowScript, plan_reply
from tests.test_sandbox import require

SALES = [("North", 12), ("South", 30), ("North", 43), ("East", 8), ("South", 5)]

TOTALS = """
import pandas
sales = pandas.read_csv("sales.csv")
totals = sales.groupby("region", sort=True)["revenue"].sum().reset_index()
totals.to_csv("totals.csv", index=False)
for region, revenue in totals.itertuples(index=False):
    print(region, revenue)
"""


def last_observation(body: dict) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "tool")


def answer_with_the_chart(body: dict) -> Reply:
    """The analyst's last reply: what the chart tool said it drew."""
    return terminate(f"Charted the totals. {last_observation(body)}")


ECHO = "(the summary repeats what it was sent)"


class AnalysisScript(FlowScript):
    """FlowScript, with replies that quote what they were sent: the analyst's
    last one the chart tool's observation, the summary the steps' answers."""

    def __init__(self, plan, steps):
        super().__init__(plan, steps, summary=ECHO)

    def __call__(self, body: dict, attempt: int):
        reply = super().__call__(body, attempt)
        if isinstance(reply, Reply) and reply.content == ECHO:
            return Reply(content="Summary: " + body["messages"][-1]["content"])
        return reply(body) if callable(reply) else reply


async def test_a_data_analysis_step_totals_a_csv_with_pandas_and_charts_it(dev_env, fake_llm, tmp_path, cli):
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace", tool_sandbox="auto")
    sandbox = ToolSandbox.detect("auto", settings.workspace_root)
    require(sandbox.mode == "bwrap", f"bubblewrap ({sandbox.problem})")
    csv = "region,revenue\n" + "".join(f"{region},{revenue}\n" for region, revenue in SALES)
    script = AnalysisScript(
        plan_reply("[manus] Save the sales figures as sales.csv", "[data_analysis] Total them by region and chart the totals"),
        {
            1: [
                Reply(tool_calls=[call("str_replace_editor", {"command": "create", "path": "sales.csv", "file_text": csv})]),
                terminate("sales.csv saved"),
            ],
            2: [
                Reply(tool_calls=[call("python_execute", {"code": TOTALS})]),
                Reply(tool_calls=[call("python_execute", {"code": "print('kept', len(totals), 'regions')"})]),
                Reply(tool_calls=[call("chart", {
                    "data": "totals.csv", "kind": "bar", "x": "region", "y": "revenue",
                    "title": "Revenue by region", "output": "charts/totals.png",
                })]),
                answer_with_the_chart,
            ],
        },
    )
    fake_llm.responder = script
    config = write_config(tmp_path, "[runflow]\nuse_data_analysis_agent = true\n")
    flow_id = f"flow-chart-{uuid.uuid4().hex[:8]}"
    env = child_env(
        tmp_path, address=server_address(dev_env), task_queue=settings.task_queue, base_url=fake_llm.base_url,
        workspace_root=settings.workspace_root,
    )
    async with build_worker(dev_env.client, settings, sandbox):
        done = await cli.in_thread(
            "--config", str(config), "--flow", "planning", "--worker", "never", "--id", flow_id, "--timeout", "600",
            "Chart last year's sales by region", env_extra=cli_environment(env),
        )
    assert done.returncode == 0, done

    planner = script.by_role["plan"][0]["messages"][0]["content"]
    assert "- data_analysis:" in planner  # the config added the analyst to a flow of manus alone
    analyst = script.by_role["step-2"]
    assert analyst[0]["messages"][0]["content"].startswith("You are a data analyst")
    assert "chart" in [tool["function"]["name"] for tool in analyst[0]["tools"]]

    totals: dict[str, int] = defaultdict(int)
    for region, revenue in SALES:
        totals[region] += revenue
    computed = last_observation(analyst[1])  # what python_execute printed, pandas' totals
    assert computed.split() == [word for region in sorted(totals) for word in (region, str(totals[region]))]
    # The analyst's Python is a session: the next call still has the frame.
    assert last_observation(analyst[2]).strip() == f"kept {len(totals)} regions"

    run_dir = Workspace(settings.workspace_root).run_dir(workspace_name_for(flow_id))
    assert (run_dir / "charts" / "totals.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drawn = last_observation(analyst[3])
    assert drawn.startswith("Wrote charts/totals.png (PNG, 1000×600 px, ")
    assert f'a bar chart titled "Revenue by region", drawn from {len(totals)} rows' in drawn
    assert f"x: region, {len(totals)} bars ({', '.join(sorted(totals))})." in drawn
    assert f"revenue: {len(totals)} points, from {min(totals.values())} to {max(totals.values())}" in drawn
    # The flow's result carries it: the analyst's answer, and the summary made from the answers.
    assert "step 2 completed: Charted the totals. Wrote charts/totals.png" in done.stdout
    summary = done.stdout[done.stdout.index("\nSummary: ") :]
    assert "step 2 (data_analysis, completed): Charted the totals. Wrote charts/totals.png (PNG" in summary
