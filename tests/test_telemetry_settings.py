"""[telemetry] and the OTEL_* variables: tracing is off unless an endpoint is
set, a bad value is one line, and the endpoint joins the control plane."""

from __future__ import annotations

from runtime.control_plane import control_plane
from testkit.settings import config_error, load_config

ENDPOINT = 'otlp_endpoint = "http://collector.lan:4318"'


def test_no_table_no_tracing(tmp_path):
    telemetry = load_config(tmp_path, "").telemetry
    assert not telemetry.enabled and telemetry.otlp_endpoint is None


def test_an_endpoint_turns_tracing_on(tmp_path):
    telemetry = load_config(tmp_path, f"[telemetry]\n{ENDPOINT}\nservice_name = \"manus-eu\"\n").telemetry
    assert telemetry.enabled and not telemetry.capture_content
    assert telemetry.traces_url == "http://collector.lan:4318/v1/traces"
    assert telemetry.service_name == "manus-eu"


def test_the_otel_variables_override_the_file(tmp_path):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://cloud.langfuse.com/api/public/otel/", "OTEL_SERVICE_NAME": "eu"}
    telemetry = load_config(tmp_path, f"[telemetry]\n{ENDPOINT}\n", env).telemetry
    assert telemetry.traces_url == "https://cloud.langfuse.com/api/public/otel/v1/traces"
    assert telemetry.service_name == "eu"


def test_otel_sdk_disabled_turns_tracing_off(tmp_path):
    assert not load_config(tmp_path, f"[telemetry]\n{ENDPOINT}\n", {"OTEL_SDK_DISABLED": "true"}).telemetry.enabled
    assert load_config(tmp_path, f"[telemetry]\n{ENDPOINT}\n", {"OTEL_SDK_DISABLED": "false"}).telemetry.enabled


def test_an_endpoint_that_is_no_http_url_is_one_line(tmp_path):
    message = config_error(tmp_path, '[telemetry]\notlp_endpoint = "collector:4317"\n')
    assert "[telemetry] otlp_endpoint must be an http:// or https:// URL" in message
    message = config_error(tmp_path, "", {"OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://collector:4317"})
    assert message.endswith("(from OTEL_EXPORTER_OTLP_ENDPOINT)")


def test_a_password_in_the_endpoint_is_refused_without_repeating_it(tmp_path):
    message = config_error(tmp_path, '[telemetry]\notlp_endpoint = "https://pk:s3cret-pw@cloud.langfuse.com"\n')
    assert "OTEL_EXPORTER_OTLP_HEADERS" in message and "s3cret-pw" not in message


def test_an_unknown_key_is_one_line(tmp_path):
    message = config_error(tmp_path, f"[telemetry]\n{ENDPOINT}\nheaders = \"x\"\n")
    assert "[telemetry] headers" in message and "capture_content" in message


def test_web_paths_and_tool_code_never_reach_the_trace_endpoint(tmp_path):
    """The endpoint receives spans from any sender, and a trace backend's UI
    (Jaeger's, Phoenix's) often listens beside it: it is control plane."""
    settings = load_config(tmp_path, f"[telemetry]\n{ENDPOINT}\n")
    endpoints = {(e.host, e.port) for e in control_plane(settings).endpoints}
    assert ("collector.lan", 4318) in endpoints


def test_headers_the_exporter_could_not_read_are_refused_unshown(tmp_path):
    """The exporter would log such an entry whole, the key in it."""
    from config.settings import load_settings

    env = {"OTEL_EXPORTER_OTLP_HEADERS": "Authorization: Bearer sk-lf-0123456789", "WORKSPACE_ROOT": str(tmp_path)}
    message = config_error(tmp_path, "", env)
    assert "OTEL_EXPORTER_OTLP_HEADERS must be name=value pairs" in message and "sk-lf" not in message
    env["OTEL_EXPORTER_OTLP_HEADERS"] = "Authorization=Basic%20cGstbGY6c2stbGY=,x-tenant=eu"
    assert load_settings(env=env).telemetry.enabled is False  # headers alone turn nothing on
