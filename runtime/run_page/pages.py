"""The pages and the fragments the event stream sends: markup only, from
data already read (run_view.py, run_list.py); every text through esc()."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from agent_model.budget import money, spent_text
from agent_model.flow import PlanningFlowResult
from agent_model.plan import Plan
from agent_model.profiles import BUILTIN_PROFILES
from agent_model.run import AgentRunResult, StepRecord
from agent_model.session import TurnRecord
from runtime.run_list import RunRow, age
from runtime.run_page.html_text import clipped, esc, hidden, option, page, run_url

OBSERVATION_SHOWN = 20_000
"""Characters of one observation on the page."""
ARGUMENTS_SHOWN = 10_000
STATES = ("running", "waiting", "finished", "failed", "cancelled")
FLOW_CHOICE = "flow:planning"
APPROVE_CHOICES = (("", "as configured"), ("none", "none"), ("risky", "risky calls"), ("all", "every call"))

Screenshots = Callable[[StepRecord], dict[int, str]]
"""The addresses of the screenshots a step's browser calls left, by call index."""


def said_line(said: tuple[bool, str] | None) -> str:
    if said is None:
        return '<p id="said" class="said" hidden></p>'
    ok, line = said
    return f'<p id="said" class="said {"ok" if ok else "error"}">{esc(line)}</p>'


# ---- the runs ------------------------------------------------------------------------------


def runs_page(rows: list[RunRow], now: datetime, state: str | None, search: str, said: tuple[bool, str] | None) -> str:
    filters = (
        '<form class="filters" method="get" action="/">'
        '<label>state <select name="state">'
        + option("", "any", not state)
        + "".join(option(s, s, s == state) for s in STATES)
        + "</select></label>"
        f'<label>task contains <input type="search" name="q" value="{esc(search)}" maxlength="200"></label>'
        '<button type="submit">show</button></form>'
    )
    if rows:
        body = "".join(run_row(row, now) for row in rows)
        table = (
            '<table class="runs"><thead><tr><th>run</th><th>agent/flow</th><th>state</th><th>step</th>'
            f"<th>age</th><th>task</th></tr></thead><tbody>{body}</tbody></table>"
        )
    else:
        table = '<p class="empty">no runs' + (" match" if state or search else " yet") + "</p>"
    return page("runs", f"<h1>Runs</h1>{said_line(said)}{start_form()}{filters}{table}")


def run_row(row: RunRow, now: datetime) -> str:
    return (
        f'<tr class="{esc(row.state_class.value)}"><td><a href="{esc(run_url(row.run_id))}">{esc(row.run_id)}</a></td>'
        f"<td>{esc(row.kind)}</td><td class=\"state\">{esc(row.status)}</td>"
        f"<td>{esc('' if row.step is None else row.step)}</td><td>{esc(age(row.started, now))}</td>"
        f'<td class="task">{esc(row.task)}</td></tr>'
    )


def start_form() -> str:
    agents = "".join(option(f"agent:{name}", name, name == "manus") for name in BUILTIN_PROFILES)
    approvals = "".join(option(value, label) for value, label in APPROVE_CHOICES)
    return (
        '<form class="act start" method="post" action="/runs">'
        '<label class="wide">task <textarea name="task" rows="3" maxlength="100000" required></textarea></label>'
        f'<label>agent <select name="kind">{agents}{option(FLOW_CHOICE, "planning flow")}</select></label>'
        '<label>flow agents <input name="agents" value="manus" maxlength="200"></label>'
        f'<label>approval <select name="approve">{approvals}</select></label>'
        '<label>max steps <input name="max_steps" inputmode="numeric" maxlength="6"></label>'
        '<button type="submit">start the run</button></form>'
    )


# ---- one run ----------------------------------------------------------------------------


def run_page(view, web_ui: str, screenshots: Screenshots, said: tuple[bool, str] | None, live: bool) -> str:
    """A run's page; `live`: the script follows its events (a running run)."""
    run_id = view.run_id
    links = [f'<a href="{esc(web_ui)}" rel="noreferrer">Temporal Web UI</a>']
    if view.parent_id:
        links.append(f'step of flow <a href="{esc(run_url(view.parent_id))}">{esc(view.parent_id)}</a>')
    if view.origin is not None:
        links.append(
            f'forked from <a href="{esc(run_url(view.origin.run_id))}">{esc(view.origin.run_id)}</a> '
            f"at step {esc(view.origin.step)}"
        )
    head = (
        f'<h1 class="run-id">{esc(run_id)}</h1><p class="task">{esc(view.task)}</p>'
        f'<p class="links">{" · ".join(links)}</p>{said_line(said)}'
    )
    status = f'<section id="status">{status_panel(view)}</section>{more_actions(view)}'
    if view.is_flow:
        body = head + status
    else:
        older = (
            f'<p class="older">{view.older_left_out} older steps are left out: python starter.py show {esc(run_id)}</p>'
            if view.older_left_out else ""
        )
        tokens = '<section id="live" hidden><h2>thinking</h2><pre class="tokens"></pre></section>'
        body = head + status + older + steps_list(view.records, view.turns, screenshots) + tokens
    turn = view.records[-1].turn if view.records else 1
    data = (
        f' data-events="{esc(run_url(run_id, "events"))}" data-since="{view.last_step}" data-turn="{turn}"'
        if live else ""
    )
    return page(run_id, body, data=data)


def steps_list(records: list[StepRecord], turns: list[TurnRecord], screenshots: Screenshots) -> str:
    messages = {t.turn: t.message for t in turns}
    items, previous = [], None
    for record in records:
        items.append(step_item(record, previous, messages, screenshots))
        previous = record.turn
    empty = "" if records else '<li class="none">no step has finished yet</li>'
    return f'<ol id="steps" class="steps">{"".join(items)}{empty}</ol>'


def step_item(
    record: StepRecord, previous_turn: int | None, messages: dict[int, str], screenshots: Screenshots
) -> str:
    """One step as a list item (and its turn's header when a new turn begins with it)."""
    turn = ""
    if record.turn != (previous_turn or 1) or (previous_turn is None and record.turn > 1):
        message = messages.get(record.turn, "")
        turn = f'<li class="turn">turn {record.turn}{": " + esc(message) if message else ""}</li>'
    cost = "" if record.cost is None else f", {money(record.cost)}"
    parts = [
        f'<div class="step-head">step {record.step}<span class="usage">'
        f"{record.usage.prompt_tokens}+{record.usage.completion_tokens} tokens{esc(cost)}</span></div>"
    ]
    if record.thought:
        parts.append(f'<div class="thought">{esc(record.thought.strip())}</div>')
    shots = screenshots(record)
    for index, call in enumerate(record.tool_calls):
        parts.append(call_block(record, index, call, shots.get(index)))
    if record.note:
        parts.append(f'<p class="note">{esc(record.note)}</p>')
    return f'{turn}<li class="step" id="step-{record.step}" data-step="{record.step}" data-turn="{record.turn}">{"".join(parts)}</li>'


def call_block(record: StepRecord, index: int, call, screenshot: str | None) -> str:
    gate = ""
    if call.approval is not None:
        decided = call.approval
        gate = f'<span class="gate">{esc(decided.action.value)} by {esc(decided.decided_by)}</span>'
    observation = clipped(call.observation, OBSERVATION_SHOWN, "all of it: python starter.py show ID")
    shot = ""
    if screenshot is not None:
        shot = (
            f'<a class="shot" href="{esc(screenshot)}" target="_blank" rel="noopener">'
            f'<img src="{esc(screenshot)}" alt="screenshot after call {record.step}.{index + 1}"></a>'
        )
    return (
        f'<div class="call"><div class="call-head">→ <code>{esc(call.name)}</code> '
        f'<span class="call-id">{record.step}.{index + 1}</span>{gate}</div>'
        f'<pre class="arguments">{esc(pretty_arguments(call.arguments))}</pre>'
        f'<pre class="observation{" error" if call.error else ""}">{esc(observation)}</pre>{shot}</div>'
    )


def pretty_arguments(arguments: str) -> str:
    text = clipped(arguments, ARGUMENTS_SHOWN, "all of it: python starter.py show ID")
    if len(arguments) > ARGUMENTS_SHOWN:
        return text
    try:
        return json.dumps(json.loads(arguments), indent=1, ensure_ascii=False)
    except ValueError:
        return text


# ---- where the run is, and what can be done --------------------------------------------


def status_panel(view) -> str:
    """The run's state, what it waits for and the actions it takes: the part
    of the page the event stream replaces when it changes."""
    outcome = view.outcome()
    parts = [
        f'<p class="state {esc(outcome.state_class.value)}"><strong>{esc(outcome.word)}</strong>'
        f"{': ' + esc(outcome.meaning) if outcome.meaning else ''}{esc(progress(view))}</p>"
    ]
    if view.unanswered:
        parts.append(f'<p class="unanswered">{esc(view.unanswered)}</p>')
    if view.ended_line:
        parts.append(f'<p class="note">{esc(view.ended_line)}</p>')
    result = view.result
    if isinstance(result, AgentRunResult):
        if result.note:
            parts.append(f'<p class="note">{esc(result.note)}</p>')
        if result.final_answer:
            parts.append(f'<div class="answer"><h2>answer</h2><pre>{esc(result.final_answer)}</pre></div>')
    elif isinstance(result, PlanningFlowResult):
        if result.note:
            parts.append(f'<p class="note">{esc(result.note)}</p>')
        if result.summary:
            parts.append(f'<div class="answer"><h2>summary</h2><pre>{esc(result.summary)}</pre></div>')
    if view.plan is not None:
        parts.append(plan_block(view.plan, view.working_step))
    parts.append(actions(view))
    return "".join(parts)


def progress(view) -> str:
    status, result = view.status, view.result
    if status is not None and not view.is_flow:
        return f" · step {status.step}/{status.max_steps} · {spent_text(status.usage, status.cost)}"
    if isinstance(result, AgentRunResult):
        return f" · {result.steps_taken} step(s) · {spent_text(result.usage, result.cost)}"
    if isinstance(result, PlanningFlowResult):
        return f" · {spent_text(result.usage, result.cost)} · {result.replans} replan(s)"
    return ""


def plan_block(plan: Plan, working: str | None) -> str:
    items = []
    for number, step in enumerate(plan.steps, start=1):
        run = ""
        if step.run_id:
            run = f' <a href="{esc(run_url(step.run_id))}">{esc(step.run_id)}</a>'
        who = f' <span class="executor">[{esc(step.executor)}]</span>' if step.executor else ""
        notes = f'<div class="notes">{esc(step.notes)}</div>' if step.notes else ""
        items.append(
            f'<li class="plan-step {esc(step.status.value)}"><span class="marker">{esc(step.status.marker)}</span> '
            f"{esc(step.text)}{who}{run}{notes}</li>"
        )
    waiting = ""
    if working:
        waiting = f'<p class="working">working: <a href="{esc(run_url(working))}">{esc(working)}</a></p>'
    return f'<div class="plan"><h2>plan: {esc(plan.title)}</h2><ol>{"".join(items)}</ol>{waiting}</div>'


def form(run_id: str, action: str, inner: str, css: str = "") -> str:
    return f'<form class="act {css}" method="post" action="{esc(run_url(run_id, action))}">{inner}</form>'


def actions(view) -> str:
    run_id, status, blocks = view.run_id, view.status, []
    if status is not None and status.pending_question is not None:
        question = status.pending_question
        blocks.append(form(run_id, "answer", (
            f'<p class="question">? {esc(question.text)}{asked_by(view)}</p>'
            '<label class="wide">your answer <textarea name="text" rows="2" maxlength="100000" required></textarea></label>'
            '<button type="submit">answer</button>'
        ), "question-form"))
    if status is not None and status.pending_approval is not None:
        waiting = status.pending_approval
        blocks.append(form(run_id, "decide", (
            f'<p class="approval">call {esc(waiting.id)}{asked_by(view)} waits for approval ({esc(waiting.reason)}): '
            f"<code>{esc(waiting.tool)}</code></p><pre class=\"arguments\">{esc(pretty_arguments(waiting.arguments))}</pre>"
            + hidden("call", waiting.id)
            + '<label class="wide">reason (to reject) <input name="reason" maxlength="2000"></label>'
            '<button type="submit" name="decision" value="approve">approve</button>'
            '<button type="submit" name="decision" value="reject" class="danger">reject</button>'
        ), "approval-form"))
    return f'<div class="actions">{"".join(blocks)}</div>'


def asked_by(view) -> str:
    """On a flow's page: which step run the question or the call is its."""
    if not view.is_flow or not view.working_step:
        return ""
    return f' <span class="asked-by">(of <a href="{esc(run_url(view.working_step))}">{esc(view.working_step)}</a>)</span>'


def more_actions(view) -> str:
    """Follow up, fork, cancel: outside the status panel the event stream
    replaces, so that what a user types there stays."""
    run_id, status, more = view.run_id, view.status, []
    follows_up = not view.is_flow and not view.parent_id
    if follows_up:
        more.append(form(run_id, "message", (
            '<label class="wide">follow-up <textarea name="text" rows="2" maxlength="32000" required></textarea></label>'
            '<button type="submit">send</button>'
        ), "follow-up"))
    if not view.is_flow:
        more.append(form(run_id, "fork", (
            f'<label>fork from step <input name="step" inputmode="numeric" maxlength="9" value="{view.last_step}"></label>'
            '<label class="wide">with the message <input name="message" maxlength="32000"></label>'
            '<button type="submit">fork</button>'
        ), "fork"))
    if view.running:
        more.append(form(run_id, "cancel", '<button type="submit" class="danger">cancel the run</button>', "cancel"))
    if not more:
        return ""
    # Open when nothing runs: a closed run or an idle session is followed up from here.
    quiet = not view.running or (status is not None and status.state.value == "IDLE")
    names = " · ".join(
        name for name, shown in (("follow up", follows_up), ("fork", not view.is_flow), ("cancel", view.running)) if shown
    )
    return f'<details class="more"{" open" if quiet else ""}><summary>{names}</summary>{"".join(more)}</details>'


def message_page(title: str, line: str) -> str:
    return page(title, f'<h1>{esc(title)}</h1><p class="said error">{esc(line)}</p>')
