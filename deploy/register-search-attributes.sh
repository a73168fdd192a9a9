#!/usr/bin/env bash
# Register the search attributes durable-manus's workflows publish; safe to re-run.
#
#   deploy/register-search-attributes.sh AgentName=Keyword AgentState=Keyword AgentStep=Int
#
# Needs the `temporal` CLI. The server is found the way every `temporal` command
# finds it (TEMPORAL_ADDRESS, TEMPORAL_API_KEY, TEMPORAL_TLS*, TEMPORAL_PROFILE);
# the namespace is TEMPORAL_NAMESPACE, default "default".
#
# It first waits, up to REGISTER_WAIT_SECONDS (default 300), for the namespace:
# temporalio/auto-setup creates it only after the server is up. An attribute that
# already exists with the requested type counts as done (older servers answer
# "already exists", newer ones succeed). One that exists with another type is an
# error: the workflows could not write it. Exit 0 only when every attribute is
# registered with its type.
set -euo pipefail

namespace="${TEMPORAL_NAMESPACE:-default}"
deadline=$((SECONDS + ${REGISTER_WAIT_SECONDS:-300}))

if [ $# -eq 0 ]; then
    echo "usage: $0 NAME=Type ... (e.g. AgentStep=Int)" >&2
    exit 2
fi
for spec in "$@"; do
    if ! [[ "$spec" =~ ^[A-Za-z][A-Za-z0-9_]*=[A-Za-z]+$ ]]; then
        echo "register-search-attributes: bad argument '$spec' (expected NAME=Type)" >&2
        exit 2
    fi
done

# "Keyword", "KEYWORD", "INDEXED_VALUE_TYPE_KEYWORD", "KeywordList", "KEYWORD_LIST"
# -> KEYWORD / KEYWORDLIST, so the CLI's and the server's spellings compare equal.
normalise() {
    local t="${1#INDEXED_VALUE_TYPE_}"
    tr -d '_' <<<"$t" | tr '[:lower:]' '[:upper:]'
}

# The attribute's type as the server reports it (normalised), or nothing.
# Only type names match (letters and "_"): SQL visibility's storage column names
# (e.g. "Keyword01") in the same answer have digits.
registered_type() {
    local listing found
    listing=$(temporal operator search-attribute list --namespace "$namespace" --output json) || return 0
    found=$(grep -o "\"$1\"[[:space:]]*:[[:space:]]*\"[A-Za-z_]*\"" <<<"$listing" | head -n 1 \
        | sed 's/.*"\([A-Za-z_]*\)"$/\1/') || true
    [ -n "$found" ] && normalise "$found"
    return 0
}

until temporal operator namespace describe --namespace "$namespace" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
        echo "register-search-attributes: namespace '$namespace' not found at ${TEMPORAL_ADDRESS:-the default address}; giving up" >&2
        exit 1
    fi
    echo "waiting for namespace '$namespace'..."
    sleep 2
done

for spec in "$@"; do
    name="${spec%%=*}"
    type="${spec#*=}"
    want=$(normalise "$type")
    created=0
    while :; do
        have=$(registered_type "$name")
        if [ "$have" = "$want" ]; then
            echo "search attribute $name ($type): registered in namespace '$namespace'"
            break
        fi
        if [ -n "$have" ]; then
            echo "register-search-attributes: $name already exists with type $have, not $type;" \
                "the workflows need $type (remove it or use another namespace)" >&2
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            echo "register-search-attributes: could not register $name ($type) in namespace '$namespace'" >&2
            exit 1
        fi
        if output=$(temporal operator search-attribute create --namespace "$namespace" \
            --name "$name" --type "$type" 2>&1); then
            if ((created)); then
                # Accepted twice but not listed: this CLI's listing is not
                # understood; a server that accepts a repeat has it with this type.
                echo "search attribute $name ($type): registered (accepted by the server)"
                break
            fi
            created=1
            continue # the next check confirms it
        fi
        output=$(tr '\n' ' ' <<<"$output")
        lower=$(tr '[:upper:]' '[:lower:]' <<<"$output")
        if [[ "$lower" == *"different type"* ]]; then
            echo "register-search-attributes: $name: $output" >&2
            exit 1
        fi
        if [[ "$lower" == *"already exists"* ]]; then
            # An older server refusing a second create. Normally the listing
            # above has shown the attribute already.
            echo "search attribute $name ($type): already registered ($output)"
            break
        fi
        echo "create $name: $output (checking again)" # e.g. the server is still starting
        sleep 2
    done
done
