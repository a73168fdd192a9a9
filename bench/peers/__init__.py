"""The side-by-side peer benchmark: durable-manus, a bare Temporal loop, the
OpenAI Agents SDK and pydantic-ai on Temporal (compare.py). Nothing here is
imported by the agent programs, which run in the peers' own venvs."""
